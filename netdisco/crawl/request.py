"""What a spider asks for: a ``Request`` and the callbacks it carries."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeAlias

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

    def __repr__(self) -> str:
        return f"<Request {self.method} {self.url}>"
