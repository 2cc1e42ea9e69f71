"""Requests as JSON or compact bytes, so that any engine can take what another queued.

Callbacks travel by method name and are looked up on the taking engine's spider
(functions and lambdas cannot travel); ``meta`` and ``cb_kwargs`` must be JSON-able.

Two formats, both read by ``decode``: JSON text (``encode``: the failed store, the
SQLite queue, page records) and the compact one (``pack``: what a Redis crawl queues,
hundreds of thousands at a time). Compact is ``PACKED`` then a MessagePack map of one
letter per field (``_LETTERS``), only the fields that differ from a new ``Request``'s,
the fingerprint as its 16 raw bytes and ``meta`` and ``cb_kwargs`` as their JSON (so they
mean the same in every format). Strings are MessagePack's raw type, not ``bin``: Redis's Lua
``cmsgpack`` then reads the priority when a lease goes back (``PRIORITY_LUA``).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from typing import Any

import msgpack

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


#: the first byte of the compact format (JSON starts with ``{``): its version, too
PACKED = b"\x01"
#: field -> its letter in the compact format (the url and fingerprint are always there)
_LETTERS = {
    "url": "u",
    "method": "m",
    "headers": "h",
    "body": "b",
    "meta": "e",
    "priority": "p",
    "callback": "c",
    "errback": "x",
    "dont_filter": "f",
    "proxy": "y",
    "depth": "d",
    "attempts": "a",
    "fingerprint": "k",
    "render": "r",
    "cb_kwargs": "w",
}
#: fields that are JSON objects of the spider's own values (JSON text in the compact format)
_JSON = ("meta", "cb_kwargs")
_FIELDS = {letter: name for name, letter in _LETTERS.items()}
_DEFAULTS = Request(url="")
#: fields that are text, and the type each other one must have once read back
_TEXT = frozenset({"url", "method", "callback", "errback", "proxy"})
_TYPES: dict[str, type | tuple[type, ...]] = {
    "body": bytes,
    "fingerprint": bytes,
    "priority": int,
    "depth": int,
    "attempts": int,
    "dont_filter": bool,
    "render": bool,
    "headers": dict,
}


class RequestCodec:
    """The ``Codec`` a shared frontier stores one spider's requests with."""

    def __init__(self, spider: Spider) -> None:
        self.spider = spider

    def encode(self, request: Request) -> str:
        """See :func:`encode`."""
        return encode(request, self.spider)

    def pack(self, request: Request) -> bytes:
        """See :func:`pack`."""
        return pack(request, self.spider)

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
    data["cb_kwargs"] = request.cb_kwargs
    try:
        return json.dumps(data, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        problem = f"meta or cb_kwargs not JSON-able: {exc}"
        raise RequestNotShareable(problem, url=request.url) from None


def pack(request: Request, spider: Spider) -> bytes:
    """The request in the compact format (module docstring): about a third of its JSON."""
    data: dict[str, Any] = {
        "callback": _method_name(request.callback, spider, request.url),
        "errback": _method_name(request.errback, spider, request.url),
    }
    data.update((name, getattr(request, name)) for name in (*_PLAIN, "body", "render"))
    for name in _JSON:
        try:
            data[name] = json.dumps(getattr(request, name), separators=(",", ":"), allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise RequestNotShareable(f"{name} is not JSON-able: {exc}", url=request.url) from None
    data["fingerprint"] = request.fingerprint
    if not all(isinstance(x, str) for pair in request.headers.items() for x in pair):
        raise RequestNotShareable("headers must map text to text", url=request.url)
    fields = {
        _LETTERS[name]: value
        for name, value in data.items()
        if name in ("url", "fingerprint") or value != _default(name)
    }
    try:
        packed: bytes = msgpack.packb(fields, use_bin_type=False)
    except (TypeError, ValueError, OverflowError) as exc:  # a header not text, a huge int
        raise RequestNotShareable(f"cannot be stored: {exc}", url=request.url) from None
    return PACKED + packed


def _default(name: str) -> Any:
    return "{}" if name in _JSON else getattr(_DEFAULTS, name, None)


def decode(raw: bytes | str, spider: Spider) -> Request:
    """The inverse of ``encode`` and of ``pack``, callbacks resolved on this process's
    spider; ``ValueError`` (or ``RequestNotShareable``) for what neither wrote."""
    if isinstance(raw, bytes) and raw.startswith(PACKED):
        return _unpack(raw[len(PACKED) :], spider)
    data = json.loads(raw)
    body = data["body"]
    return Request(
        **{name: data[name] for name in _PLAIN},
        body=None if body is None else base64.b64decode(body),
        fingerprint=bytes.fromhex(data["fingerprint"]),
        callback=_resolve(spider, data["callback"]),
        errback=_resolve(spider, data["errback"]),
        render=data.get("render", False),  # absent in requests queued by older versions
        cb_kwargs=_object(data.get("cb_kwargs", {}), "cb_kwargs"),
    )


def _unpack(raw: bytes, spider: Spider) -> Request:
    fields = msgpack.unpackb(raw, raw=True, strict_map_key=False)
    if not isinstance(fields, dict):
        raise ValueError("a packed request is not a map")
    data = {_FIELDS[_text(letter)]: value for letter, value in fields.items()}
    for name in _TEXT & data.keys():
        data[name] = _text(data[name])
    if "headers" in data:
        data["headers"] = _headers(data["headers"])
    for name, kind in _TYPES.items():
        if name in data and not isinstance(data[name], kind):
            raise ValueError(f"a packed request's {name} is a {type(data[name]).__name__}")
    for name in _JSON:
        data[name] = _object(json.loads(data.pop(name, b"{}")), name)
    data["callback"] = _resolve(spider, data.get("callback"))
    data["errback"] = _resolve(spider, data.get("errback"))
    return Request(**data)


def _object(value: Any, name: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ValueError(f"a stored request's {name} is not an object")
    return value


def _text(value: Any) -> str:
    """A MessagePack raw string as text (``KeyError`` and ``ValueError`` on anything else)."""
    if not isinstance(value, bytes):
        raise ValueError(f"expected a string, found a {type(value).__name__}")
    return value.decode()


def _headers(value: Any) -> dict[str, str]:
    if not isinstance(value, dict):
        raise ValueError("a packed request's headers are not a map")
    return {_text(name): _text(text) for name, text in value.items()}


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
