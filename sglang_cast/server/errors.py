"""Every error leaves the server in OpenAI's shape,
``{"error": {"message", "type", "param", "code"}}``, with a 4xx status that says
whose fault it is: validation problems are 400 (never FastAPI's 422), unknown
routes 404, and only real server faults 500.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

log = logging.getLogger(__name__)

ERROR_TYPES = {400: "invalid_request_error", 401: "invalid_request_error", 404: "invalid_request_error",
               405: "invalid_request_error", 413: "invalid_request_error", 503: "service_unavailable_error"}
ECHO_CHARS = 80  # how much of a rejected value an error message quotes


class ApiError(Exception):
    def __init__(self, status: int, message: str, *, param: str | None = None, code: str | None = None,
                 error_type: str | None = None, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.error_type = error_type or ERROR_TYPES.get(status, "server_error")
        self.headers = headers

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.error_type, "param": self.param, "code": self.code}}

    def response(self) -> JSONResponse:
        return JSONResponse(self.body(), status_code=self.status, headers=self.headers)


def bad_request(message: str, param: str | None = None) -> ApiError:
    return ApiError(400, message, param=param)


def service_unavailable(message: str) -> ApiError:
    return ApiError(503, message, headers={"Retry-After": "1"})


# Names pydantic puts in an error location for the member of a union it tried.
_TYPE_TAGS = frozenset({"str", "int", "float", "bool", "list", "dict", "none"})


def _is_field(part: object) -> bool:
    text = str(part)
    return not (text == "body" or text in _TYPE_TAGS or "[" in text or text[:1].isupper())


def _quote(value: object) -> str:
    text = repr(value)  # repr escapes lone surrogates, so the message stays encodable
    return text if len(text) <= ECHO_CHARS else f"{text[:ECHO_CHARS]}... ({len(text)} characters)"


def validation_error(exc: RequestValidationError) -> ApiError:
    """The most telling problem pydantic found, as a 400 naming the field: a value
    error (bad range, bad text) rather than the type mismatch of a union member
    the value was never meant for."""
    errors = exc.errors()
    first = next((e for e in errors if not str(e.get("type", "")).endswith("_type")), errors[0])
    if first.get("type") == "json_invalid":
        detail = first.get("ctx", {}).get("error", first.get("msg"))
        return bad_request(f"request body is not valid JSON: {detail}")
    field = ".".join(str(part) for part in first.get("loc", ()) if _is_field(part))
    if not field:
        return bad_request(f"request body must be a JSON object sent as Content-Type: application/json "
                           f"({first.get('msg')})")
    if first.get("type") == "missing":
        return bad_request(f"{field}: field required", param=field)
    message = str(first.get("msg")).removeprefix("Value error, ")  # our own validators' messages, as written
    return bad_request(f"{field}: {message} (got {_quote(first.get('input'))})", param=field)


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def api_error(_: Request, exc: ApiError) -> JSONResponse:
        return exc.response()

    @app.exception_handler(RequestValidationError)
    async def invalid_request(_: Request, exc: RequestValidationError) -> JSONResponse:
        return validation_error(exc).response()

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        return ApiError(exc.status_code, str(exc.detail), headers=exc.headers).response()

    @app.exception_handler(Exception)
    async def internal_error(_: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error")
        return ApiError(500, f"internal server error: {exc}").response()
