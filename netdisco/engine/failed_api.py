"""``/netdiscovery/spiders/{name}/failed``: a spider's failed requests, listed, retried, forgotten.

Listing is a read route (like the status); retry and delete are control routes (the
bearer token). Every query value and body is checked before the store sees it:
a reason is a short lowercase word, ids are hex fingerprints, offsets and limits are
bounded. A store that cannot answer now (Redis down, a ``state_dir`` held by another
process since the crawl ended) answers 503 rather than hanging the request.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from aiohttp import web
from redis.exceptions import RedisError

from netdisco.engine.replies import json_response, read_json
from netdisco.exceptions import ApiError, StateDirError
from netdisco.frontiers.failed import MAX_LIMIT

if TYPE_CHECKING:
    from collections.abc import Awaitable

    from netdisco.crawl.crawler import Crawler
    from netdisco.engine.engine import SpiderEngine

_REASON = re.compile(r"[a-z][a-z0-9_]{0,39}")
_ID = re.compile(r"[0-9a-f]{1,64}")
#: the most ids one retry may name
MAX_IDS = MAX_LIMIT
DEFAULT_LIMIT = 100
_MAX_OFFSET = 10**9


def _reason(value: str | None) -> str | None:
    if value is None or value == "":
        return None
    if not _REASON.fullmatch(value):
        raise ApiError(400, "invalid_reason", "a reason is like 'http_404' or 'timeout'")
    return value


def _bounded_int(request: web.Request, key: str, default: int, low: int, high: int) -> int:
    raw = request.query.get(key)
    if raw is None or raw == "":
        return default
    if not raw.isdigit() or not low <= int(raw) <= high:
        raise ApiError(400, "invalid_value", f"{key} is a whole number from {low} to {high}")
    return int(raw)


def _ids(value: Any) -> list[str]:
    if not isinstance(value, list) or not value or len(value) > MAX_IDS:
        raise ApiError(400, "invalid_body", f'"ids" is a list of 1 to {MAX_IDS} ids')
    if not all(isinstance(i, str) and _ID.fullmatch(i) for i in value):
        raise ApiError(400, "invalid_body", '"ids" holds the ids GET .../failed lists')
    return list(value)


def _selection(body: Any) -> tuple[str | None, Sequence[str] | None]:
    """``{}`` (all), ``{"reason": r}`` or ``{"ids": [...]}``."""
    if not isinstance(body, dict) or set(body) - {"reason", "ids"} or len(body) > 1:
        raise ApiError(400, "invalid_body", 'expected {}, {"reason": r} or {"ids": [...]}')
    if "ids" in body:
        return None, _ids(body["ids"])
    reason = body.get("reason")
    if "reason" in body and not isinstance(reason, str):
        raise ApiError(400, "invalid_reason", "a reason is a string")
    return _reason(reason), None


async def _store(call: Awaitable[Any]) -> Any:
    """The store's answer, or 503 when it cannot give one now."""
    try:
        return await call
    except StateDirError as exc:
        raise ApiError(503, "store_unavailable", str(exc)) from None
    except (RedisError, TimeoutError, OSError) as exc:
        message = f"the failed store did not answer: {exc!r}"
        raise ApiError(503, "store_unavailable", message) from None


async def list_failed(request: web.Request) -> web.Response:
    """``GET .../failed?reason=&offset=&limit=``: the kept failures, oldest first."""
    crawler = _crawler(request)
    reason = _reason(request.query.get("reason"))
    offset = _bounded_int(request, "offset", 0, 0, _MAX_OFFSET)
    limit = _bounded_int(request, "limit", DEFAULT_LIMIT, 0, MAX_LIMIT)
    page = await _store(crawler.failures.page(reason, offset, limit))
    return json_response(
        {
            "spider": crawler.name,
            "total": page.total,
            "dropped": page.dropped,
            "by_reason": page.by_reason,
            "failed": [asdict(record) for record in page.records],
        }
    )


async def retry_failed(request: web.Request) -> web.Response:
    """``POST .../failed/retry``: queue them again (409 unless running or paused)."""
    engine = _authorized(request)
    crawler = engine.crawler(request.match_info["name"])
    reason, ids = _selection(await read_json(request, engine.settings.max_body))
    requeued = await _store(crawler.retry_failed(reason, ids))
    return json_response({"requeued": requeued})


async def delete_failed(request: web.Request) -> web.Response:
    """``DELETE .../failed[?reason=]``: forget them."""
    engine = _authorized(request)
    crawler = engine.crawler(request.match_info["name"])
    deleted = await _store(crawler.failures.delete(_reason(request.query.get("reason"))))
    return json_response({"deleted": deleted})


def _crawler(request: web.Request) -> Crawler:
    from netdisco.engine.api import ENGINE

    return request.app[ENGINE].crawler(request.match_info["name"])


def _authorized(request: web.Request) -> SpiderEngine:
    from netdisco.engine.api import authorize

    return authorize(request)


def add_routes(app: web.Application) -> None:
    """The three routes, on the engine's application."""
    base = "/netdiscovery/spiders/{name}/failed"
    app.router.add_get(base, list_failed, allow_head=False)
    app.router.add_post(base + "/retry", retry_failed)
    app.router.add_delete(base, delete_failed)
