"""The endpoint's answers: JSON bodies, the one error shape, and the middleware behind it.

Every error is ``{"error": {"code", "message"}}`` (plus ``key`` when a setting is
to blame) with a real status code; a middleware turns netdisco's errors into
these by type, and a bug into a logged 500, never a stack trace.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

import structlog
from aiohttp import web

from netdisco.exceptions import (
    ApiError,
    ConfigError,
    DuplicateSpider,
    FeedError,
    InvalidTransition,
    NetdiscoError,
    SettingNotAllowed,
    SpiderLoadError,
    SpiderNotAllowed,
    UnknownSpider,
)

log = structlog.get_logger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

_CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    413: "payload_too_large",
    415: "unsupported_media_type",
}


def dumps(data: Any) -> bytes:
    return json.dumps(data, default=str, separators=(",", ":")).encode()


def json_response(data: Any, status: int = 200) -> web.Response:
    """A JSON answer (compact: this endpoint is polled by machines)."""
    return web.Response(body=dumps(data), status=status, content_type="application/json")


def error_response(
    status: int,
    code: str,
    message: str,
    headers: dict[str, str] | None = None,
    *,
    key: str | None = None,
) -> web.Response:
    """The one shape every error takes (``key`` names the bad setting, when one is)."""
    error: dict[str, str] = {"code": code, "message": message}
    if key is not None:
        error["key"] = key
    body = dumps({"error": error})
    response = web.Response(body=body, status=status, content_type="application/json")
    response.headers.update(headers or {})
    return response


#: netdisco errors a handler may raise -> status and code (the first match in MRO order wins)
_ERRORS: dict[type[NetdiscoError], tuple[int, str]] = {
    UnknownSpider: (404, "unknown_spider"),
    InvalidTransition: (409, "invalid_transition"),
    DuplicateSpider: (409, "spider_exists"),
    SettingNotAllowed: (400, "setting_not_allowed"),
    ConfigError: (400, "invalid_value"),
    FeedError: (400, "feed_not_allowed"),
    SpiderNotAllowed: (400, "spider_not_allowed"),
    SpiderLoadError: (400, "spider_not_loadable"),
}


def _netdisco_error(exc: NetdiscoError) -> web.Response | None:
    for kind in type(exc).__mro__:
        if kind in _ERRORS:
            status, code = _ERRORS[kind]
            key = exc.key if isinstance(exc, ConfigError) else None
            return error_response(status, code, str(exc), key=key)
    return None


@web.middleware
async def errors_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Turn every failure into a JSON error with a real status code."""
    try:
        return await handler(request)
    except ApiError as exc:
        headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
        return error_response(exc.status, exc.code, exc.message, headers)
    except NetdiscoError as exc:
        answer = _netdisco_error(exc)
        if answer is None:
            log.exception("http_handler_failed", method=request.method, path=request.path)
            answer = error_response(500, "internal_error", "the engine failed to answer")
        return answer
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        headers = {"Allow": exc.headers["Allow"]} if "Allow" in exc.headers else None
        code = _CODES.get(exc.status, "http_error")
        return error_response(exc.status, code, exc.reason, headers)
    except Exception:
        log.exception("http_handler_failed", method=request.method, path=request.path)
        return error_response(500, "internal_error", "the engine failed to answer; see its log")


async def read_json(request: web.Request, max_body: int) -> Any:
    """A JSON body, or the 415/413/400 that explains why not."""
    if request.content_type != "application/json":
        raise ApiError(415, "unsupported_media_type", "send the body as application/json")
    if request.content_length is not None and request.content_length > max_body:
        raise ApiError(413, "payload_too_large", f"the body must not exceed {max_body} bytes")
    try:
        raw = await request.read()
    except web.HTTPRequestEntityTooLarge:
        raise ApiError(
            413, "payload_too_large", f"the body must not exceed {max_body} bytes"
        ) from None
    try:
        data = json.loads(raw, parse_constant=_no_constant)
        # "\ud800" is valid JSON but no text: it would fail later, wherever it is encoded
        json.dumps(data, ensure_ascii=False).encode()
    except (ValueError, RecursionError) as exc:  # UnicodeError is a ValueError
        raise ApiError(400, "invalid_json", f"the body is not valid JSON: {exc}") from None
    return data


def _no_constant(name: str) -> Any:
    """``NaN``, ``Infinity`` and ``-Infinity``: Python's JSON reads them, JSON has none."""
    raise ValueError(f"{name} is not a JSON value")
