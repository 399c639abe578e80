"""A cap on HTTP requests in flight, checked before a body is read.

Every request in flight may hold its body (up to ``--max-request-bytes``) and
the parsed prompt in memory, so their number is what bounds the server's memory
under a flood.  Requests past the cap get a 503 with ``Retry-After`` without
their body being read; probes (``/health``, ``/metrics``, ...) are never
counted or refused.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send

from .access import OPEN_PATHS
from .errors import service_unavailable

# Beyond the requests the engine can hold (running + queued): room for info and
# admin routes, and for requests being parsed that will get the engine's 503.
IN_FLIGHT_HEADROOM = 16


class InFlightLimitMiddleware:
    def __init__(self, app: ASGIApp, max_in_flight: int) -> None:
        self.app = app
        self.max_in_flight = max_in_flight
        self.in_flight = 0  # touched on the event loop only

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in OPEN_PATHS:
            await self.app(scope, receive, send)
            return
        if self.in_flight >= self.max_in_flight:
            error = service_unavailable(f"the server has {self.in_flight} requests in flight, its limit; retry later")
            await error.response()(scope, receive, send)
            return
        self.in_flight += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.in_flight -= 1
