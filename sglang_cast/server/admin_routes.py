"""Operator endpoints: Prometheus ``/metrics`` and the CAST profile
(``GET /cast/profile``, ``POST /cast/reload``)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST
from starlette.concurrency import run_in_threadpool

from ..profile import ProfileError
from .errors import bad_request
from .state import server_state

router = APIRouter()


@router.get("/metrics")
async def metrics(request: Request) -> Response:
    # Off the event loop: the scrape charges the live calibration's new iterations.
    return Response(await run_in_threadpool(server_state(request).metrics.render), media_type=CONTENT_TYPE_LATEST)


@router.get("/cast/profile")
async def cast_profile(request: Request) -> dict[str, Any]:
    return server_state(request).profiles.status()


@router.post("/cast/reload")
async def cast_reload(request: Request) -> dict[str, Any]:
    """Check the profile file now instead of waiting for the watcher; 400 with the
    reason if the file is rejected (the previous profile stays active)."""
    profiles = server_state(request).profiles
    try:
        # Blocks until the engine thread has swapped the settings in.
        reloaded = await run_in_threadpool(profiles.reload)
    except ProfileError as err:
        raise bad_request(str(err)) from None
    return {"reloaded": reloaded, "profile": profiles.status()}
