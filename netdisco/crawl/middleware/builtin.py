"""The shipped middlewares: default headers, user agents, proxies, cookies.

Each is enabled by a setting (``default_headers``, ``user_agents``, ``proxies``,
``cookies``) and changes only the per-attempt copy of a request the downloader
hands to the chain, so a retry starts from the request as the spider made it.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterable, Mapping, Sequence
from http.cookies import CookieError, SimpleCookie
from typing import TYPE_CHECKING

import aiohttp
import structlog
from yarl import URL

from netdisco.crawl.middleware.base import Middleware
from netdisco.crawl.request import Request
from netdisco.crawl.response import Response
from netdisco.exceptions import TransferFailed

if TYPE_CHECKING:
    from netdisco.crawl.spider import Spider

log = structlog.get_logger(__name__)


class DefaultHeaders(Middleware):
    """Adds headers a request does not set itself (names compared case-insensitively)."""

    def __init__(self, headers: Mapping[str, str]) -> None:
        self.headers = dict(headers)

    async def process_request(self, request: Request, spider: Spider) -> None:
        present = {name.lower() for name in request.headers}
        for name, value in self.headers.items():
            if name.lower() not in present:
                request.headers[name] = value


class UserAgentRotation(Middleware):
    """Gives each request the next user agent of a list, unless it sets its own."""

    def __init__(self, agents: Sequence[str]) -> None:
        if not agents:
            raise ValueError("UserAgentRotation needs at least one user agent")
        self._agents = itertools.cycle(agents)

    async def process_request(self, request: Request, spider: Spider) -> None:
        if not any(name.lower() == "user-agent" for name in request.headers):
            request.headers["User-Agent"] = next(self._agents)


class ProxyRotation(Middleware):
    """Sends each request through the next proxy of a list, unless it names its own.

    A proxy that fails (a connection error or timeout, or HTTP 407) is skipped for
    ``backoff`` seconds, doubling with each failure in a row up to 64 x ``backoff``;
    an answer clears its record. When every proxy is backing off, the one free
    soonest is used rather than none.
    """

    def __init__(self, proxies: Sequence[str], backoff: float = 30.0) -> None:
        if not proxies:
            raise ValueError("ProxyRotation needs at least one proxy")
        self.proxies = list(proxies)
        self.backoff = backoff
        self.failures = dict.fromkeys(self.proxies, 0)
        self._until = dict.fromkeys(self.proxies, 0.0)
        self._next = 0

    def choose(self) -> str:
        """The next proxy in turn that is not backing off (or the one free soonest)."""
        now = time.monotonic()
        count = len(self.proxies)
        for step in range(count):
            proxy = self.proxies[(self._next + step) % count]
            if self._until[proxy] <= now:
                self._next = (self._next + step + 1) % count
                return proxy
        return min(self.proxies, key=self._until.__getitem__)

    async def process_request(self, request: Request, spider: Spider) -> None:
        if request.proxy is None:
            request.proxy = self.choose()

    async def process_response(
        self, request: Request, response: Response, spider: Spider
    ) -> Response:
        proxy = request.proxy
        if proxy in self.failures:
            if response.status == 407:
                self._failed(proxy)
            else:
                self.failures[proxy] = 0
        return response

    async def process_exception(self, request: Request, exc: BaseException, spider: Spider) -> None:
        proxy = request.proxy
        if proxy in self.failures and isinstance(exc, TransferFailed):
            self._failed(proxy)

    def _failed(self, proxy: str) -> None:
        self.failures[proxy] += 1
        pause = self.backoff * 2 ** min(self.failures[proxy] - 1, 6)
        self._until[proxy] = time.monotonic() + pause
        log.warning("proxy_backing_off", proxy=proxy, seconds=pause)


class Cookies(Middleware):
    """One cookie jar for the spider: sends what it holds, keeps what responses set."""

    def __init__(self) -> None:
        self.jar = aiohttp.CookieJar(unsafe=True)  # unsafe: IP hosts may set cookies too

    async def process_request(self, request: Request, spider: Spider) -> None:
        if not len(self.jar):  # no cookie yet: no URL to parse
            return
        cookies = self.jar.filter_cookies(URL(request.url))
        if not cookies:
            return
        ours = "; ".join(f"{name}={morsel.value}" for name, morsel in cookies.items())
        mine = next((k for k in request.headers if k.lower() == "cookie"), None)
        if mine is None:
            request.headers["Cookie"] = ours
        else:
            request.headers[mine] = f"{request.headers[mine]}; {ours}"

    async def process_response(
        self, request: Request, response: Response, spider: Spider
    ) -> Response:
        for header in _set_cookies(response.headers):
            cookie: SimpleCookie = SimpleCookie()
            try:
                cookie.load(header)
            except CookieError:
                log.debug("cookie_ignored", url=response.url, header=header)
                continue
            self.jar.update_cookies(cookie, URL(response.url))
        return response


def _set_cookies(headers: Mapping[str, str]) -> Iterable[str]:
    """Every Set-Cookie header (a multidict holds several; a plain mapping one)."""
    getall = getattr(headers, "getall", None)
    if getall is not None:
        values: list[str] = getall("Set-Cookie", [])
        return values
    value = headers.get("Set-Cookie")
    return [] if value is None else [value]


#: ``Request.meta`` key of the validators a re-crawl sends (``netdisco.crawl.recrawl``)
VALIDATORS = "netdisco.validators"


class Revalidation(Middleware):
    """Adds the stored validators a re-crawl put in ``meta`` to every hop of the request
    (first in the chain, so the other middlewares see them); a request's own headers win."""

    async def process_request(self, request: Request, spider: Spider) -> None:
        headers = request.meta.get(VALIDATORS)
        if headers:
            present = {name.lower() for name in request.headers}
            request.headers.update((k, v) for k, v in headers.items() if k.lower() not in present)
