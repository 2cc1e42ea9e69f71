"""What a spider asks for: a ``Request`` and the callbacks it carries."""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, TypeAlias

from netdisco.crawl.urls import host_key

#: What a callback may return: nothing, items and requests (sync or async generator), or
#: a coroutine returning any of these.
CallbackResult: TypeAlias = "Iterable[Any] | AsyncIterator[Any] | Awaitable[Any] | None"
#: a callback takes the response, and the request's ``cb_kwargs`` as keyword arguments
Callback: TypeAlias = "Callable[..., CallbackResult]"
Errback: TypeAlias = "Callable[[Request, BaseException], CallbackResult]"


@dataclass(slots=True, eq=False, init=False)
class Request:
    """One HTTP request to make, and what to do with its response.

    ``depth`` and ``fingerprint`` are filled in by the scheduler; ``dont_filter``
    skips the duplicate check (for pages that must be fetched again); ``render``
    fetches the page through headless Chromium (as the ``render`` setting does for all).
    ``cb_kwargs`` are passed to the callback as keyword arguments.

    A callable second argument is the callback, as Scrapy users write it
    (``Request(url, self.parse)``); a string there is the method, as before.
    """

    url: str
    method: str = "GET"
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    priority: int = 0
    callback: Callback | None = None
    errback: Errback | None = None
    dont_filter: bool = False
    proxy: str | None = None
    depth: int = 0
    fingerprint: bytes = b""
    attempts: int = 0
    render: bool = False
    cb_kwargs: dict[str, Any] = field(default_factory=dict)

    def __init__(
        self,
        url: str,
        method: str | Callback = "GET",
        headers: dict[str, str] | str | None = None,
        body: bytes | None = None,
        meta: dict[str, Any] | None = None,
        priority: int = 0,
        callback: Callback | None = None,
        errback: Errback | None = None,
        dont_filter: bool = False,
        proxy: str | None = None,
        depth: int = 0,
        fingerprint: bytes = b"",
        attempts: int = 0,
        render: bool = False,
        cb_kwargs: dict[str, Any] | None = None,
    ) -> None:
        if callable(method):  # Scrapy's order: Request(url, callback, method, headers, ...)
            if callback is not None:
                raise TypeError("Request got two callbacks: one by position, one by keyword")
            callback = method
            method, headers = (headers, None) if isinstance(headers, str) else ("GET", headers)
        if not isinstance(method, str) or isinstance(headers, str):
            raise TypeError(f"Request(url, method, headers): got {method!r}, {headers!r}")
        self.url, self.method, self.callback, self.errback = url, method, callback, errback
        self.headers = {} if headers is None else headers
        self.body, self.priority, self.dont_filter, self.proxy = body, priority, dont_filter, proxy
        self.meta = {} if meta is None else meta
        self.depth, self.fingerprint, self.attempts = depth, fingerprint, attempts
        self.render = render
        self.cb_kwargs = {} if cb_kwargs is None else cb_kwargs

    @property
    def host_key(self) -> str:
        """The politeness key: requests with one key share one host's limits."""
        return host_key(self.url)

    def __repr__(self) -> str:
        return f"<Request {self.method} {self.url}>"


async def outputs(result: CallbackResult) -> AsyncIterator[Any]:
    """What a callback produced, one value at a time, whatever its shape (a plain or
    async generator, a list, an awaitable of one, a single item, or nothing)."""
    if inspect.isawaitable(result):
        result = await result
    if isinstance(result, AsyncIterator):
        async for value in result:
            yield value
    elif isinstance(result, Iterable) and not isinstance(result, str | bytes | dict):
        for value in result:
            yield value
    elif result is not None:
        yield result
