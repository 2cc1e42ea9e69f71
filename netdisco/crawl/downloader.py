"""Step 3 of the data flow: fetch a request politely, retrying what is worth retrying.

One aiohttp session for the spider. Per host: a concurrency cap and a delay that
gates when a request may *start*. Redirects are followed by hand so that every
hop is re-checked against scope, the seen set and robots.txt, and loops are caught.
Each hop goes through the downloader middleware chain (``crawl.middleware``) to a
download handler: aiohttp (``transport.py``), or Chromium for rendered requests.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import replace
from functools import partial
from typing import TYPE_CHECKING

import aiohttp
import structlog

from netdisco.crawl.middleware import Chain, HttpCache, Middleware, build_middlewares
from netdisco.crawl.politeness import (
    Answer,
    Arrived,
    Deferred,
    Failed,
    RobotsRead,
    politeness_for,
)
from netdisco.crawl.redirects import (
    REDIRECT_STATUSES,
    defrag,
    redirect_request,
    without_credentials,
)
from netdisco.crawl.request import Request
from netdisco.crawl.response import Response
from netdisco.crawl.robots import RobotsCache
from netdisco.crawl.settings import Settings
from netdisco.crawl.transport import AiohttpHandler, DownloadHandler, describe, sent_trace
from netdisco.crawl.urls import canonical_url, origin
from netdisco.exceptions import (
    BrowserCrashed,
    DownloadFailed,
    HttpStatusError,
    LeaseFenced,
    RobotsDenied,
    TooManyRedirects,
    TransferFailed,
)

if TYPE_CHECKING:
    from netdisco.crawl.context import CrawlContext
    from netdisco.crawl.render import RenderingHandler
    from netdisco.crawl.scheduler import Scheduler

log = structlog.get_logger(__name__)

RETRY_STATUSES = frozenset({408, 429, *range(500, 600)})


class Downloader:
    """Fetches requests under global and per-host limits; see the module docstring."""

    def __init__(
        self,
        ctx: CrawlContext,
        scheduler: Scheduler,
        *,
        first: Sequence[Middleware] = (),
        last: Sequence[Middleware] = (),
        handler: DownloadHandler | None = None,
    ) -> None:
        """``scheduler`` admits redirect targets (scope, seen set); ``first`` are the
        crawl's own middlewares, ahead of the configured, ``last`` after them (nearest
        the download: the WARC archive sees what the handler returned); ``handler``
        downloads each hop (default: aiohttp over a session of ours)."""
        settings, frontier = ctx.settings, ctx.frontier
        self.settings = settings
        self.stats = ctx.stats
        self.spider = ctx.spider
        self.frontier = frontier
        self.scheduler = scheduler
        self.middlewares = [*first, *build_middlewares(settings, ctx.spider), *last]
        self._session: aiohttp.ClientSession | None = None
        self._http: DownloadHandler | None = handler
        self._own_session = handler is None
        self.renderer: RenderingHandler | None = None
        self.chain = Chain(self.middlewares, ctx.spider, self._transfer)
        self.robots: RobotsCache | None = None

        def blocked(url: str) -> bool:  # its requests would only wait for robots.txt
            return self.robots is not None and self.robots.unreachable(url)

        def denied(url: str) -> bool:
            return self.robots is not None and self.robots.denies(url)

        #: each host's slots, delay, rest and giving up: here, or in the frontier's queues
        self.politeness = politeness_for(
            settings, frontier, blocked=blocked, denied=denied, wake=partial(ctx.notify, 1)
        )

    async def open(self) -> None:
        """Create the session (inside the running loop); start Chromium if ``render`` is set."""
        s = self.settings
        if self._own_session:
            self._session = _session(s)
            self._http = AiohttpHandler(self._session, s)
        assert self._http is not None
        if s.obey_robots:  # robots.txt bypasses the chain, but not the HTTP cache
            cache = next((m for m in self.middlewares if isinstance(m, HttpCache)), None)
            handler = self._http if cache is None else cache.wrap(self._http)
            self.robots = RobotsCache(handler, s)
        log.info("downloader_chain", middlewares=self.chain.names, render=s.render)
        if s.render:
            await self._renderer().start()  # a missing browser fails the start, named

    def _renderer(self) -> RenderingHandler:
        """The browser handler, made on first use (Playwright is an optional extra)."""
        if self.renderer is None:
            from netdisco.crawl.render import RenderingHandler

            assert self._http is not None, "Downloader.open() was not awaited"
            self.renderer = RenderingHandler(self._http, self.settings, self.stats)
        return self.renderer

    async def close(self) -> None:
        """Stop the browser, close the session and its connections."""
        if self.renderer is not None:
            await self.renderer.close()
        if self.robots is not None:
            await self.robots.close()
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def fetch(self, request: Request) -> Response | Deferred:
        """Download ``request`` with retries: its response, a ``Deferred`` (it waits in
        its host's queue in the frontier), or a ``RequestError`` when it cannot be had.

        The host's slot is freed as soon as the download is over (the request's
        acknowledgement waits for its items to be flushed; the host need not).
        """
        politeness = self.politeness
        with politeness.fetching(request):
            outcome = await self._attempts(request)
        if isinstance(outcome, Response):
            await politeness.ended(request, outcome)
        return outcome

    async def _attempts(self, request: Request) -> Response | Deferred:
        """The first attempt and the retries, until a response, a deferral or a
        ``RequestError``."""
        s, politeness = self.settings, self.politeness
        claimed: set[str] = set()  # redirect targets this request claimed (kept over retries)
        while True:
            request.attempts += 1
            try:
                response = await self._follow(request, claimed)
            except (TransferFailed, BrowserCrashed) as exc:
                retryable = not isinstance(exc, TransferFailed) or exc.retryable
                if request.attempts > s.retries or not retryable:
                    raise DownloadFailed(describe(exc), url=request.url) from exc
                failed = Failed(None, {}, again=True)
            else:
                if isinstance(response, Deferred) or response.status < 400:
                    return response
                again = response.status in RETRY_STATUSES and request.attempts <= s.retries
                failed = Failed(response.status, response.headers, again)
                if not again:  # a 429 or a 503 not retried still rests the host
                    await politeness.ended(request, failed)
                    raise HttpStatusError(
                        f"HTTP {response.status}", url=response.url, status=response.status
                    )
            self.stats.retried += 1
            if (deferred := await politeness.ended(request, failed)) is not None:
                return deferred

    async def _follow(self, request: Request, claimed: set[str]) -> Response | Deferred:
        """One attempt: the request and its redirect hops, each checked before it is made.

        Each hop is a copy of the request (the middlewares may change it freely); the
        response's ``request`` is the spider's own, its ``url`` the last hop's.
        """
        politeness = self.politeness
        hop = replace(request, url=defrag(request.url), headers=dict(request.headers))
        visited: set[str] = set()
        home, left = origin(request.url), False
        for count in range(self.settings.max_redirects + 1):
            key = canonical_url(hop.url)
            if key in visited:
                raise TooManyRedirects(f"redirect loop back to {hop.url}", url=request.url)
            visited.add(key)
            if count:
                await self._check_redirect(request, hop, key, claimed)
            await self._check_robots(hop)
            if not await self.frontier.may_start(request):
                return Deferred("its lease may be another engine's now", give_back=True)
            try:
                response = await self.chain(hop)
            except LeaseFenced:  # the fence closed while it waited for its host's turn
                return Deferred("its lease may be another engine's now", give_back=True)
            location = response.headers.get("Location")
            if response.status not in REDIRECT_STATUSES or not location:
                await politeness.ended(request, Arrived())
                response.request = request
                return response
            hop = redirect_request(request, hop, response.status, location)
            left = left or origin(hop.url) != home
            if left:  # credentials stay with their origin, and do not come back with it
                hop.headers = without_credentials(hop.headers)
            if (deferred := await politeness.ended(request, Arrived(hop, count + 1))) is not None:
                return deferred
        raise TooManyRedirects(
            f"more than {self.settings.max_redirects} redirects", url=request.url
        )

    async def _check_redirect(
        self, request: Request, hop: Request, key: str, claimed: set[str]
    ) -> None:
        """The scheduler admits the target (valid, in scope, not seen), once per request:
        a retry does not find its own earlier claim."""
        if key in claimed:
            return
        claimed.add(key)
        await self.scheduler.admit_redirect(hop, dont_filter=request.dont_filter)

    async def _check_robots(self, hop: Request) -> None:
        """robots.txt's answer; while it is unreachable the request waits, it does not fail."""
        if self.robots is None:
            return
        try:
            allowed = await self.robots.allowed(hop.url, hop.proxy or self.settings.proxy)
        except asyncio.CancelledError:
            if self.robots.unreachable(hop.url):  # the spider stops: handed back, and counted
                self.stats.robots_deferred += 1
            raise
        if not allowed:
            raise RobotsDenied("disallowed by robots.txt", url=hop.url)
        # robots.txt was a request there too: the host's delay runs from its end
        read = RobotsRead(self.robots.crawl_delay(hop.url), self.robots.fetched_at(hop.url))
        await self.politeness.ended(hop, read)

    def drain(self) -> list[Request]:
        """Every request set aside (to hand back to the frontier on close)."""
        requests = self.politeness.drain()
        if self.robots is not None:  # handed back while their robots.txt did not answer
            self.stats.robots_deferred += sum(self.robots.unreachable(r.url) for r in requests)
        return requests

    async def _transfer(self, request: Request) -> Response:
        """The innermost step of the chain: politeness, then the handler (browser or aiohttp)."""
        if self._http is None:
            raise RuntimeError("Downloader.open() was not awaited")
        handler: DownloadHandler = self._http
        if request.render or self.settings.render:
            handler = self._renderer()
        reports_sent = self._own_session and handler is self._http
        async with self.politeness.turn(request, reports_sent):
            if not self.frontier.may_start_now(request):  # the last moment before it goes
                raise LeaseFenced(f"{request.url}: the lease fence closed before it went out")
            began = time.monotonic()
            response = await handler.fetch(request)
        took = time.monotonic() - began
        self.stats.bytes += len(response.body)
        self.stats.responded(response.status, took)
        told = bool(response.headers.get("Retry-After"))
        await self.politeness.ended(request, Answer(response.status, took, told))
        return response


def _session(s: Settings) -> aiohttp.ClientSession:
    """The spider's session: its connection limits, timeouts and agent, no cookies (the
    cookie middleware keeps them)."""
    connector = aiohttp.TCPConnector(limit=s.concurrency, limit_per_host=0, ttl_dns_cache=300)
    return aiohttp.ClientSession(
        connector=connector,
        timeout=aiohttp.ClientTimeout(total=s.timeout, sock_connect=s.connect_timeout),
        headers={"User-Agent": s.user_agent},
        cookie_jar=aiohttp.DummyCookieJar(),
        trace_configs=[sent_trace()],
    )
