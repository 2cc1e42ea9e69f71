"""Downloader middleware: async hooks around every download, in a visible order.

``process_request`` runs in chain order before the download and may return a new
``Request`` (it replaces the one going down the chain) or a ``Response`` (nothing
is downloaded); ``process_response`` runs in reverse order and returns the
response to pass on; ``process_exception`` runs in reverse order when the download
raised and may return a ``Response`` to recover, or None to let the error go on
(to the downloader's retries). The chain runs once per redirect hop, so cookies set
on a redirect are seen. A hook that raises fails the request with a
``MiddlewareError``; one that returns the wrong type, with a ``MiddlewareTypeError``.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

from netdisco.crawl.request import Request
from netdisco.crawl.response import Response
from netdisco.exceptions import LeaseFenced, MiddlewareError, MiddlewareTypeError, RequestError

if TYPE_CHECKING:
    from netdisco.crawl.spider import Spider

Download = Callable[[Request], Awaitable[Response]]
HOOKS = ("process_request", "process_response", "process_exception")


class Middleware:
    """Base class: override any of the three hooks; the chain skips the ones you don't."""

    async def process_request(self, request: Request, spider: Spider) -> Request | Response | None:
        """Change ``request`` in place (None), replace it (Request) or answer it (Response)."""
        return None

    async def process_response(
        self, request: Request, response: Response, spider: Spider
    ) -> Response:
        """The response to pass on (``response`` itself, or another)."""
        return response

    async def process_exception(
        self, request: Request, exc: BaseException, spider: Spider
    ) -> Response | None:
        """A response that stands in for the failed download, or None to let it fail."""
        return None


def middleware_name(middleware: object) -> str:
    """How logs, errors and ``Chain.names`` call a middleware."""
    return type(middleware).__name__


def _hooks(middlewares: Sequence[Middleware], hook: str) -> list[tuple[str, Any]]:
    """(name, bound method) of every middleware that overrides ``hook``; each must be async."""
    found = []
    for middleware in middlewares:
        method = getattr(middleware, hook, None)
        if method is None or getattr(type(middleware), hook, None) is getattr(Middleware, hook):
            continue
        name = middleware_name(middleware)
        if not inspect.iscoroutinefunction(method):
            raise TypeError(f"middleware {name}.{hook} must be an async def")
        found.append((name, method))
    return found


class Chain:
    """The ordered middlewares around a download function; see the module docstring."""

    def __init__(self, middlewares: Sequence[Middleware], spider: Spider, download: Download):
        self.names = [middleware_name(m) for m in middlewares]
        self.spider = spider
        self.download = download
        self._requests = _hooks(middlewares, "process_request")
        self._responses = _hooks(middlewares, "process_response")[::-1]
        self._exceptions = _hooks(middlewares, "process_exception")[::-1]

    async def __call__(self, request: Request) -> Response:
        """Run ``request`` through the hooks and the download."""
        request, response = await self._before(request)
        if response is None:
            response = await self._download(request)
        return await self._after(request, response) if self._responses else response

    async def _before(self, request: Request) -> tuple[Request, Response | None]:
        with (current := _Current("process_request", request)):
            for current.name, method in self._requests:
                result = await method(request, self.spider)
                if isinstance(result, Response):
                    return request, result
                if isinstance(result, Request):
                    request = current.request = result
                elif result is not None:
                    raise current.wrong(result, "None, Request or Response")
        return request, None

    async def _after(self, request: Request, response: Response) -> Response:
        with (current := _Current("process_response", request)):
            for current.name, method in self._responses:
                response = await method(request, response, self.spider)
                if not isinstance(response, Response):
                    raise current.wrong(response, "a Response")
        return response

    async def _download(self, request: Request) -> Response:
        try:
            return await self.download(request)
        except LeaseFenced:  # not the middlewares' to recover: it goes back unstarted
            raise
        except Exception as exc:
            if not self._exceptions:
                raise
            recovered = await self._recover(request, exc)
            if recovered is None:
                raise
            return recovered

    async def _recover(self, request: Request, error: Exception) -> Response | None:
        with (current := _Current("process_exception", request)):
            for current.name, method in self._exceptions:
                result = await method(request, error, self.spider)
                if isinstance(result, Response):
                    return result
                if result is not None:
                    raise current.wrong(result, "None or Response")
        return None


class _Current:
    """The hook running now: turns what it raises into the MiddlewareError that fails the
    request (a RequestError, the wrong type's included, passes as it is)."""

    __slots__ = ("hook", "name", "request")

    def __init__(self, hook: str, request: Request) -> None:
        self.hook = hook
        self.name = ""
        self.request = request

    def __enter__(self) -> _Current:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, _: Any) -> None:
        if exc is None or isinstance(exc, RequestError) or not isinstance(exc, Exception):
            return
        message = f"middleware {self.name}.{self.hook} raised {exc!r}"
        raise MiddlewareError(message, url=self.request.url, middleware=self.name) from exc

    def wrong(self, value: object, expected: str) -> MiddlewareTypeError:
        """The error for a hook that returned ``value`` instead of ``expected``."""
        return MiddlewareTypeError(
            f"middleware {self.name}.{self.hook} returned {type(value).__name__}, "
            f"expected {expected}",
            url=self.request.url,
            middleware=self.name,
        )
