"""Who may call what: ``--api-key`` for the serving routes, ``--admin-api-key``
for the operator routes (SGLang's rules).

    route kind   no key set   only --api-key   only --admin-api-key   both
    open         anyone       anyone           anyone                 anyone
    serving      anyone       api key          anyone                 api key
    admin        anyone       api key          admin key              admin key (the api key is refused)
"""

from __future__ import annotations

import hmac

from starlette.types import ASGIApp, Receive, Scope, Send

from .errors import ApiError

OPEN_PATHS = frozenset({"/health", "/health_generate", "/metrics"})  # probes and scrapers carry no secrets
# Routes that change the server or reveal its files and settings.
ADMIN_PATHS = frozenset({"/cast/reload", "/cast/profile", "/flush_cache", "/server_info", "/get_server_info"})


def required_key(path: str, api_key: str | None, admin_api_key: str | None) -> str | None:
    """The key a request to ``path`` must carry, or ``None`` if it needs none."""
    if path in OPEN_PATHS:
        return None
    if path in ADMIN_PATHS:
        return admin_api_key or api_key
    return api_key


class ApiKeyMiddleware:
    """Answers 401 in OpenAI's shape unless ``Authorization: Bearer <key>`` carries
    the key `required_key` names."""

    def __init__(self, app: ASGIApp, api_key: str | None, admin_api_key: str | None) -> None:
        self.app = app
        self.api_key = api_key
        self.admin_api_key = admin_api_key

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            key = required_key(scope["path"], self.api_key, self.admin_api_key)
            given = dict(scope["headers"]).get(b"authorization", b"")
            if key is not None and not hmac.compare_digest(given, f"Bearer {key}".encode()):
                which = "admin API key" if key == self.admin_api_key else "API key"
                error = ApiError(401, f"missing or incorrect {which}: send 'Authorization: Bearer <key>'",
                                 code="invalid_api_key")
                await error.response()(scope, receive, send)
                return
        await self.app(scope, receive, send)
