"""The request-body cap, enforced before anything parses the body.

A declared ``Content-Length`` over the cap is refused without reading a byte; a
body without one (chunked) is read only until it passes the cap.  Either way the
answer is a 413 naming the limit and its flag, and the server never holds more
than the cap of one request's body in memory.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .errors import ApiError


def too_large(limit: int) -> ApiError:
    return ApiError(413, f"request body is larger than the limit of {limit} bytes (--max-request-bytes)",
                    code="request_too_large")


def declared_length(scope: Scope) -> int | None:
    value = dict(scope["headers"]).get(b"content-length")
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


class BodyLimitMiddleware:
    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = declared_length(scope)
        if length is not None and length > self.max_bytes:
            await too_large(self.max_bytes).response()(scope, receive, send)
            return
        body = await self._read_body(receive)
        if body is None:
            await too_large(self.max_bytes).response()(scope, receive, send)
            return
        await self.app(scope, self._replay(body, receive), send)

    async def _read_body(self, receive: Receive) -> bytes | None:
        """The whole body, or ``None`` as soon as it passes the cap."""
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client went away: nothing to serve
                return b""
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                return None
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)

    @staticmethod
    def _replay(body: bytes, receive: Receive) -> Receive:
        """The app's ``receive``: the buffered body once, then the real channel (so
        handlers still hear ``http.disconnect``)."""
        sent = False

        async def replayed() -> Message:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        return replayed
