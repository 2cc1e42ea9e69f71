"""What a spider asks for: a ``Request`` and the callbacks it carries."""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeAlias

from netdisco.crawl.urls import host_key

if TYPE_CHECKING:
    from netdisco.crawl.response import Response

#: What a callback may return: nothing, items and requests (sync or async generator), or
#: a coroutine returning any of these.
CallbackResult: TypeAlias = "Iterable[Any] | AsyncIterator[Any] | Awaitable[Any] | None"
Callback: TypeAlias = "Callable[[Response], CallbackResult]"
Errback: TypeAlias = "Callable[[Request, BaseException], CallbackResult]"


@dataclass(slots=True, eq=False)
class Request:
    """One HTTP request to make, and what to do with its response.

    ``depth`` and ``fingerprint`` are filled in by the scheduler; ``dont_filter``
    skips the duplicate check (for pages that must be fetched again); ``render``
    fetches the page through headless Chromium (as the ``render`` setting does for all).
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
