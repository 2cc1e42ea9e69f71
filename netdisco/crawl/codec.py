"""Requests as JSON, so that any engine can take what another queued.

Callbacks travel by method name and are looked up on the taking engine's spider
(functions and lambdas cannot travel); ``meta`` must be JSON-able.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from typing import Any

from netdisco.crawl.request import Request
from netdisco.crawl.settings import Settings
from netdisco.crawl.spider import Spider
from netdisco.exceptions import RequestNotShareable
from netdisco.frontiers import Frontier, open_frontier


def _method_name(function: Callable[..., Any] | None, spider: Spider, url: str) -> str | None:
    if function is None:
        return None
    name = getattr(function, "__name__", "")
    if getattr(function, "__self__", None) is spider and getattr(spider, name, None) == function:
        return str(name)
    raise RequestNotShareable(
        f"callback {function!r} is not a method of spider {spider.name!r}; "
        "a shared frontier stores callbacks by method name",
        url=url,
    )


def _resolve(spider: Spider, name: str | None) -> Any:
    if name is None:
        return None
    method = getattr(spider, name, None)
    if not callable(method):
        raise RequestNotShareable(f"spider {spider.name!r} has no method {name!r}", url="")
    return method


#: Request fields stored as they are (JSON types); body, fingerprint and callbacks are converted.
_PLAIN = (
    "url",
    "method",
    "headers",
    "meta",
    "priority",
    "dont_filter",
    "proxy",
    "depth",
    "attempts",
)


class RequestCodec:
    """The ``Codec`` a shared frontier stores one spider's requests with."""

    def __init__(self, spider: Spider) -> None:
        self.spider = spider

    def encode(self, request: Request) -> str:
        """See :func:`encode`."""
        return encode(request, self.spider)

    def decode(self, raw: bytes | str) -> Request:
        """See :func:`decode`."""
        return decode(raw, self.spider)


def encode(request: Request, spider: Spider) -> str:
    """The request as JSON; callbacks by method name. ``RequestNotShareable`` if it cannot."""
    data = {name: getattr(request, name) for name in _PLAIN}
    data["render"] = request.render
    data["body"] = None if request.body is None else base64.b64encode(request.body).decode()
    data["fingerprint"] = request.fingerprint.hex()
    data["callback"] = _method_name(request.callback, spider, request.url)
    data["errback"] = _method_name(request.errback, spider, request.url)
    try:
        return json.dumps(data, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise RequestNotShareable(f"meta is not JSON-able: {exc}", url=request.url) from None


def decode(raw: bytes | str, spider: Spider) -> Request:
    """The inverse of ``encode``, callbacks resolved on this process's spider."""
    data = json.loads(raw)
    body = data["body"]
    return Request(
        **{name: data[name] for name in _PLAIN},
        body=None if body is None else base64.b64decode(body),
        fingerprint=bytes.fromhex(data["fingerprint"]),
        callback=_resolve(spider, data["callback"]),
        errback=_resolve(spider, data["errback"]),
        render=data.get("render", False),  # absent in requests queued by older versions
    )


def frontier_for(settings: Settings, spider: Spider, owner: str | None) -> Frontier[Request]:
    """The frontier ``settings.frontier`` names; ``owner`` labels our leases in a shared one."""
    codec = RequestCodec(spider)
    return open_frontier(
        settings.frontier,
        spider.name,
        codec,
        owner=owner,
        state_dir=settings.state_dir,
        memory_queue_limit=settings.memory_queue_limit,
    )
