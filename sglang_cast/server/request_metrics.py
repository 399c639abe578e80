"""Counts of HTTP responses by endpoint and status code, for ``/metrics``.

Outermost of the middlewares, so it counts every answer, 401s and 503s included."""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send

from .metrics import ServerMetrics


class RequestMetricsMiddleware:
    """Counts every response by endpoint and status code (unknown paths pooled as
    "other", so scanners cannot blow up the label set)."""

    def __init__(self, app: ASGIApp, metrics: ServerMetrics, endpoints: frozenset[str]) -> None:
        self.app = app
        self.metrics = metrics
        self.endpoints = endpoints

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = 500

        async def record_status(message: dict) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, record_status)
        finally:
            endpoint = scope["path"] if scope["path"] in self.endpoints else "other"
            self.metrics.requests.labels(endpoint=endpoint, status=str(status)).inc()
