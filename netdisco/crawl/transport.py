"""Download handlers: one request, one hop, no redirects followed.

``AiohttpHandler`` is the default, over the spider's aiohttp session; ``MockHandler``
answers from a function, for tests that need no sockets (``Crawler(...,
download_handler=MockHandler(...))``, as httpx's ``MockTransport``). aiohttp's errors
stop here: above a handler only netdisco's (``TransferFailed``) are raised.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping
from contextvars import ContextVar
from types import SimpleNamespace
from typing import Protocol

import aiohttp
from multidict import CIMultiDict
from yarl import URL

from netdisco.crawl.request import Request
from netdisco.crawl.response import Response
from netdisco.crawl.settings import Settings
from netdisco.crawl.urls import wire_url
from netdisco.exceptions import InvalidURL, ResponseTooLarge, TransferFailed, TransferTimeout

#: network failures worth another try; DNS failures are not (the name will not appear)
_RETRYABLE = (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError)


#: called (by the session's trace) when the current task's request has been sent: the
#: downloader counts the host's delay from that moment, not from when it let it go
SENT: ContextVar[Callable[[], None] | None] = ContextVar("netdisco_sent", default=None)


def sent_trace() -> aiohttp.TraceConfig:
    """A trace that calls ``SENT`` once the request's headers are written (a GET
    goes out with them, in the same step)."""

    async def headers_sent(
        session: aiohttp.ClientSession, ctx: SimpleNamespace, params: object
    ) -> None:
        callback = SENT.get()
        if callback is not None:
            callback()

    trace = aiohttp.TraceConfig()
    trace.on_request_headers_sent.append(headers_sent)
    return trace


class DownloadHandler(Protocol):
    """What turns one request (one hop, no redirects followed) into a response."""

    async def fetch(self, request: Request) -> Response:
        """The response to ``request``; a network failure raises ``TransferFailed``."""
        ...


def describe(exc: BaseException) -> str:
    """A readable reason for a failure (TimeoutError has no message; a TransferFailed
    carries its reason already)."""
    if isinstance(exc, TransferFailed):
        return str(exc)
    if isinstance(exc, TimeoutError):
        return "timed out"
    return f"{type(exc).__name__}: {exc}"


class AiohttpHandler:
    """Fetches a request without following redirects, stopping at ``max_response_size``."""

    def __init__(self, session: aiohttp.ClientSession, settings: Settings) -> None:
        self.session = session
        self.settings = settings

    async def fetch(self, request: Request) -> Response:
        """The response; aiohttp's errors come out as ``TransferFailed`` or ``InvalidURL``.

        The URL goes out as the standard serialises it, not re-encoded by yarl (which
        would send ``/(%28:%3A%29)`` as ``/((::))`` and ``/foo%2`` as ``/foo%252``)."""
        url = request.url
        try:
            async with self.session.request(
                request.method,
                URL(wire_url(url), encoded=True),
                headers=request.headers or None,
                data=request.body,
                proxy=request.proxy or self.settings.proxy,
                allow_redirects=False,
            ) as resp:
                data = await self._read(resp, url)
        except (aiohttp.InvalidURL, ValueError) as exc:
            raise InvalidURL(f"cannot request {url!r}: {exc}", url=url) from exc
        except TimeoutError as exc:
            raise TransferTimeout(describe(exc), url=url, retryable=True) from exc
        except aiohttp.ClientConnectorDNSError as exc:  # the name will not appear on a retry
            raise TransferFailed(describe(exc), url=url, retryable=False) from exc
        except _RETRYABLE as exc:
            raise TransferFailed(describe(exc), url=url, retryable=True) from exc
        except aiohttp.ClientError as exc:  # a malformed answer: retrying will not mend it
            raise TransferFailed(describe(exc), url=url, retryable=False) from exc
        return Response(url, resp.status, resp.headers, data, request)

    async def _read(self, resp: aiohttp.ClientResponse, url: str) -> bytes:
        """The body, or ResponseTooLarge as soon as it passes ``max_response_size``."""
        limit = self.settings.max_response_size
        length = resp.content_length
        if limit and length is not None and length > limit:
            raise ResponseTooLarge(f"Content-Length {length} > {limit} bytes", url=url)
        if not limit or (length is not None and "Content-Encoding" not in resp.headers):
            return await resp.read()
        data = bytearray()
        async for chunk in resp.content.iter_any():
            data += chunk
            if len(data) > limit:
                raise ResponseTooLarge(f"body passed {limit} bytes", url=url)
        return bytes(data)


Respond = Callable[[Request], "Response | Awaitable[Response]"]


class MockHandler:
    """Answers every request from ``respond(request)`` (plain or async): no sockets.

    ``MockHandler.pages({url: body})`` answers those URLs 200 (HTML) and others 404.
    ``requests`` lists what was asked, in order, for tests to assert on.
    """

    def __init__(self, respond: Respond) -> None:
        self.respond = respond
        self.requests: list[Request] = []

    @classmethod
    def pages(
        cls, pages: Mapping[str, str | bytes], *, content_type: str = "text/html"
    ) -> MockHandler:
        """A handler serving ``pages`` by exact URL; any other URL is a 404."""

        def respond(request: Request) -> Response:
            body = pages.get(request.url)
            if body is None:
                return Response(request.url, 404, CIMultiDict(), b"", request)
            data = body.encode() if isinstance(body, str) else body
            headers = CIMultiDict({"Content-Type": content_type})
            return Response(request.url, 200, headers, data, request)

        return cls(respond)

    async def fetch(self, request: Request) -> Response:
        self.requests.append(request)
        answer = self.respond(request)
        return await answer if inspect.isawaitable(answer) else answer
