"""The app factory: one FastAPI app around one already-built Engine.

Taking the Engine (not paths) is what lets tests serve a tiny random model
through exactly the code the real server runs.  A caller serving for speed builds
it on a passing thread, as `launch_server` does (`build_thread.py`).  The engine
thread and the profile watcher live as long as the app's lifespan: started when
uvicorn starts serving, stopped after its graceful shutdown has let open requests
finish.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from ..engine import Engine
from . import admin_routes, native_routes, openai_routes
from .access import ApiKeyMiddleware
from .body_limit import BodyLimitMiddleware
from .config import ServerConfig
from .engine_worker import EngineWorker
from .errors import install_error_handlers
from .in_flight import IN_FLIGHT_HEADROOM, InFlightLimitMiddleware
from .metrics import ServerMetrics
from .profile_reload import ProfileReloader
from .prompt_encoder import PromptEncoder
from .request_metrics import RequestMetricsMiddleware
from .state import ServerState


def create_app(engine: Engine, config: ServerConfig) -> FastAPI:
    metrics = ServerMetrics()
    worker = EngineWorker(engine, metrics, max_outstanding=engine.max_batch_size + config.max_queued_requests,
                          live_gate=config.live_gate)
    profiles = ProfileReloader(config.profile, config.shape_override, engine.tree_room, worker.reconfigure,
                               metrics, config.profile_poll_seconds, str(engine.target.weight_format),
                               config.calibration)
    encoder = PromptEncoder(engine.tokenizer, engine.target.config.vocab_size, engine.context_length,
                            max_pending=worker.max_outstanding)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        worker.start(asyncio.get_running_loop())
        profiles.start()
        try:
            yield
        finally:
            profiles.stop()
            await asyncio.to_thread(worker.stop)
            encoder.close()

    app = FastAPI(title="sglang-cast", lifespan=lifespan)
    app.state.server = ServerState(engine, config, worker, metrics, profiles, encoder)
    install_error_handlers(app)
    routers = (openai_routes.router, native_routes.router, admin_routes.router)
    for router in routers:
        app.include_router(router)
    # Added innermost first: metrics see every answer, a caller without the key is
    # refused before its body is read, so is a request past the in-flight cap, and
    # the body is capped before parsing.
    app.add_middleware(BodyLimitMiddleware, max_bytes=config.request_bytes_limit(engine.context_length))
    app.add_middleware(InFlightLimitMiddleware,
                       max_in_flight=config.max_in_flight_requests or worker.max_outstanding + IN_FLIGHT_HEADROOM)
    if config.api_key or config.admin_api_key:
        app.add_middleware(ApiKeyMiddleware, api_key=config.api_key, admin_api_key=config.admin_api_key)
    endpoints = frozenset(route.path for router in routers for route in router.routes)
    app.add_middleware(RequestMetricsMiddleware, metrics=metrics, endpoints=endpoints)  # outermost: counts 401s too
    return app
