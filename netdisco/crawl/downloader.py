"""Step 3 of the data flow: fetch a request politely, retrying what is worth retrying.

One aiohttp session for the spider. Per host: a concurrency cap and a delay that
gates when a request may *start*. Redirects are followed by hand so that every
hop is re-checked against scope, the seen set and robots.txt, and loops are caught.
Each hop goes through the downloader middleware chain (``crawl.middleware``) to a
download handler: aiohttp (``transport.py``), or Chromium for rendered requests.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import math
import random
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import replace
from email.utils import parsedate_to_datetime
from typing import TYPE_CHECKING

import aiohttp
import structlog

from netdisco.crawl.hosts import Hold, Placement, ReadyHosts
from netdisco.crawl.lru import LRU
from netdisco.crawl.middleware import Chain, HttpCache, Middleware, build_middlewares
from netdisco.crawl.redirects import (
    REDIRECT_STATUSES,
    defrag,
    hand_off,
    redirect_request,
    without_credentials,
)
from netdisco.crawl.request import Request
from netdisco.crawl.response import Response
from netdisco.crawl.robots import RobotsCache
from netdisco.crawl.settings import Settings
from netdisco.crawl.throttle import SLOW_DOWN, Throttle
from netdisco.crawl.transport import SENT, AiohttpHandler, DownloadHandler, describe, sent_trace
from netdisco.crawl.urls import canonical_url, origin
from netdisco.exceptions import (
    BrowserCrashed,
    DownloadFailed,
    HostGivenUp,
    HttpStatusError,
    RequestError,
    RetryDeferred,
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
#: the hold of the request this task downloads (``ReadyHosts``): its turn ends the wait
_HOLD: contextvars.ContextVar[Hold | None] = contextvars.ContextVar("hold", default=None)


class HostErrors:
    """Failures in a row per host (netloc), and the hosts given up after
    ``host_error_limit`` of them: their requests fail at once, so a dead host ends."""

    def __init__(self, limit: int, size: int) -> None:
        self.limit = limit
        self._row: LRU[str, int] = LRU(size)
        self._given_up: LRU[str, str] = LRU(size)

    def check(self, request: Request) -> None:
        """``HostGivenUp`` if the request's host was given up."""
        if (reason := self._given_up.peek(request.host_key)) is not None:
            raise HostGivenUp(reason, url=request.url)

    def row(self, request: Request) -> int:
        """The host's failures in a row so far: a retry to it backs off that much longer."""
        return self._row.peek(request.host_key) or 0

    def record(self, request: Request, exc: RequestError | None) -> None:
        """One final outcome of a request to its host (``None``: it answered)."""
        host = request.host_key
        if exc is None:
            self._row.pop(host)
            return
        if not self.limit:
            return
        if isinstance(exc, HostGivenUp):  # robots.txt gave up: so does every request
            self._given_up.put(host, str(exc).removeprefix(f"{request.url}: "))
            return
        if not isinstance(exc, DownloadFailed | HttpStatusError) or (
            isinstance(exc, HttpStatusError) and exc.status < 500
        ):
            return
        row = self._row.put(host, (self._row.peek(host) or 0) + 1)
        if row >= self.limit and host not in self._given_up:  # in flight: already given up
            log.warning("host_given_up", host=host, failures=row, last=str(exc))
            self._given_up.put(host, f"{host} failed {row} times in a row (last: {exc})")


def retry_after(headers: Mapping[str, str], cap: float) -> float | None:
    """Seconds asked for by a Retry-After header (delta or HTTP date), capped at ``cap``
    (``retry_max_delay``; the cap is logged: the server asked for longer)."""
    value = headers.get("Retry-After")
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            seconds = parsedate_to_datetime(value).timestamp() - time.time()
        except (TypeError, ValueError):
            return None
    if not math.isfinite(seconds):
        return None
    if seconds > cap:
        log.info("retry_after_capped", asked=round(seconds, 1), cap=cap)
        return cap
    return max(seconds, 0.0)


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
        downloads each hop (default: aiohttp over a session of ours). A frontier that
        reserves hosts holds per-host politeness for every engine."""
        settings, frontier = ctx.settings, ctx.frontier
        self.settings = settings
        self.stats = ctx.stats
        self._wake = ctx.notify
        self.spider = ctx.spider
        self.frontier = frontier
        self.scheduler = scheduler
        self.middlewares = [*first, *build_middlewares(settings, ctx.spider), *last]
        self.host_errors = HostErrors(settings.host_error_limit, settings.host_cache_size)
        self.throttle = Throttle(settings)
        self._session: aiohttp.ClientSession | None = None
        self._http: DownloadHandler | None = handler
        self._own_session = handler is None
        self.renderer: RenderingHandler | None = None
        self.chain = Chain(self.middlewares, ctx.spider, self._transfer)
        self.robots: RobotsCache | None = None
        #: the frontier when it reserves each request's host slot; then we keep no limits
        self.reserved_by = frontier if frontier.reserves_hosts else None
        #: else each host's slot and queue, and the hosts due first (``crawl.hosts``)
        self.hosts = None if self.reserved_by else self._ready_hosts(settings)
        frontier.set_politeness(settings.download_delay, settings.per_host_concurrency)

    def _ready_hosts(self, s: Settings) -> ReadyHosts:
        def blocked(url: str) -> bool:  # its requests would only wait for robots.txt
            return self.robots is not None and self.robots.unreachable(url)

        def denied(url: str) -> bool:
            return self.robots is not None and self.robots.denies(url)

        limit = 4 * s.concurrency
        return ReadyHosts(
            self.throttle, size=s.host_cache_size, limit=limit, blocked=blocked, denied=denied
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
            self.robots = RobotsCache(handler, s, self.frontier.robots_txt)
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

    async def fetch(self, request: Request) -> Response:
        """Download ``request`` with retries; raise a ``RequestError`` when it cannot be had.

        With host queues the host's slot is freed as soon as the download is over (the
        request's acknowledgement waits for its items to be flushed; the host need not).
        """
        token = _HOLD.set(None if self.hosts is None else self.hosts.hold_of(request))
        try:
            self.host_errors.check(request)
            response = await self._attempts(request)
        except RequestError as exc:
            self.host_errors.record(request, exc)
            if self.reserved_by is not None and not exc.deferred:
                self.reserved_by.fetched(request, sent=not _nothing_sent(request, exc))
            raise
        finally:
            _HOLD.reset(token)
            self.release(request)
        self.host_errors.record(request, None)
        if self.reserved_by is not None:
            self.reserved_by.fetched(request)
        return response

    async def _attempts(self, request: Request) -> Response:
        """The first attempt and the retries, until a response or a ``RequestError``."""
        s = self.settings
        claimed: set[str] = set()  # redirect targets this request claimed (kept over retries)
        while True:
            request.attempts += 1
            try:
                response = await self._follow(request, claimed)
            except (TransferFailed, BrowserCrashed) as exc:
                retryable = not isinstance(exc, TransferFailed) or exc.retryable
                if request.attempts > s.retries or not retryable:
                    raise DownloadFailed(describe(exc), url=request.url) from exc
                delay, told = self._backoff(request), False
            else:
                if response.status < 400:
                    return response
                if response.status not in RETRY_STATUSES or request.attempts > s.retries:
                    if response.status in SLOW_DOWN:  # not retried, but the host was told
                        self._rest(request, *self._told_to_wait(request, response))
                    raise HttpStatusError(
                        f"HTTP {response.status}", url=response.url, status=response.status
                    )
                delay, told = self._told_to_wait(request, response)
            self.stats.retried += 1
            await self._retry_later(request, delay, told)

    def _told_to_wait(self, request: Request, response: Response) -> tuple[float, bool]:
        """How long to wait before a retry, and whether the server said so: the
        Retry-After asked for (capped), else the backoff."""
        asked = retry_after(response.headers, self.settings.retry_max_delay)
        return (self._backoff(request), False) if asked is None else (asked, True)

    def _rest(self, request: Request, delay: float, told: bool = False) -> None:
        """The whole host waits ``delay`` (a 429, a 503, a failure), not only ``request``;
        ``told``: the server said how long, and its word replaces the host's own delay."""
        slot = None if self.hosts is None else self.hosts.peek(request.host_key)
        if slot is not None:
            slot.rest(delay, told)

    async def _retry_later(self, request: Request, delay: float, told: bool = False) -> None:
        """Sleep ``delay`` then try again, or, with host queues, hand the retry back.

        Either way the whole host rests ``delay``, not only this request. A retry here
        would start on a slot no one reserved; the frontier instead backs the host off
        for every engine and the request waits its turn there.
        """
        if self.reserved_by is None:
            self._rest(request, delay, told)
            await asyncio.sleep(delay)
            return
        delay = max(delay, self.throttle.delay(request.host_key))
        await self.reserved_by.back_off(request, delay)
        raise RetryDeferred(f"retry in {delay:.2f} s, from the host queue", url=request.url)

    def _backoff(self, request: Request) -> float:
        """Exponential backoff with full jitter around the nominal delay, capped; it
        doubles with each attempt and with each failure in a row of the host before."""
        exponent = request.attempts - 1 + self.host_errors.row(request)
        nominal = self.settings.retry_backoff * (2 ** min(exponent, 30))
        jittered: float = nominal * random.uniform(0.5, 1.5)
        return min(jittered, self.settings.retry_max_delay)

    async def _follow(self, request: Request, claimed: set[str]) -> Response:
        """One attempt: the request and its redirect hops, each checked before it is made.

        Each hop is a copy of the request (the middlewares may change it freely); the
        response's ``request`` is the spider's own, its ``url`` the last hop's.
        """
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
            if self.reserved_by is not None:
                await self._reserved_pace(request, hop, count)
            response = await self.chain(hop)
            if self.reserved_by is not None:  # the host's delay runs from here
                self.reserved_by.responded(request)
            location = response.headers.get("Location")
            if response.status not in REDIRECT_STATUSES or not location:
                response.request = request
                return response
            hop = redirect_request(request, hop, response.status, location)
            left = left or origin(hop.url) != home
            if left:  # credentials stay with their origin, and do not come back with it
                hop.headers = without_credentials(hop.headers)
            if self.reserved_by is not None and hop.host_key != request.host_key:
                raise hand_off(request, hop, count + 1, self.settings.max_redirects)
        raise TooManyRedirects(
            f"more than {self.settings.max_redirects} redirects", url=request.url
        )

    async def _reserved_pace(self, request: Request, hop: Request, count: int) -> None:
        """With host queues: tell them this host's delay and slots (for every engine);
        a redirect hop waits the delay in our slot, after the hop before. A first hop
        whose slot was reserved under a looser pace goes back to wait its turn."""
        assert self.reserved_by is not None
        host = hop.host_key
        delay = self.throttle.delay(host)
        stricter = await self.reserved_by.pace(request, delay, self.throttle.concurrency(host))
        if count:
            await asyncio.sleep(delay)
        elif stricter:
            request.attempts -= 1  # not an attempt: nothing was sent
            await self.reserved_by.back_off(request, delay)
            raise RetryDeferred("the host's pace changed: back to its queue", url=request.url)

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
        host = hop.host_key
        self.throttle.crawl_delay(host, self.robots.crawl_delay(hop.url))
        since = time.monotonic() - self.robots.fetched_at(hop.url)
        if since < (delay := self.throttle.delay(host)):  # robots.txt was a request there too
            await asyncio.sleep(delay - since)

    def place(self, request: Request) -> Placement:
        """Whether ``request`` may start now, waits aside, or goes back (``ReadyHosts``);
        with host queues every request may (the frontier reserved its slot)."""
        return "go" if self.hosts is None else self.hosts.place(request)

    def ready(self) -> Request | None:
        """A request set aside whose host is due now, first due first."""
        return None if self.hosts is None else self.hosts.ready()

    def taking(self) -> bool:
        """Whether a worker may take another request (there is room aside)."""
        return self.hosts is None or self.hosts.taking()

    def next_due(self) -> float | None:
        """Seconds until a host with requests aside may be due (None: none waits)."""
        return None if self.hosts is None else self.hosts.next_due()

    def release(self, request: Request) -> None:
        """``request`` is over (fetched, failed, or skipped by a re-crawl): its slot frees."""
        if self.hosts is not None:
            self.hosts.release(request)  # the crawl wakes idle workers after the scrape

    def idle_share(self) -> float | None:
        """``ReadyHosts.idle_share`` (None with host queues: the frontier decides there)."""
        return None if self.hosts is None else self.hosts.idle_share()

    def parked_by_host(self) -> dict[str, int]:
        """How many requests are set aside for each host (none when hosts are reserved)."""
        return {} if self.hosts is None else self.hosts.parked_by_host()

    def drain(self) -> list[Request]:
        """Every request set aside (to hand back to the frontier on close)."""
        if self.hosts is None:
            return []
        requests = self.hosts.drain()
        if self.robots is not None:  # handed back while their robots.txt did not answer
            self.stats.robots_deferred += sum(self.robots.unreachable(r.url) for r in requests)
        return requests

    @contextlib.asynccontextmanager
    async def _turn(self, host: str, reports_sent: bool) -> AsyncIterator[None]:
        """The host's slot and delay here, unless the frontier reserved them already.

        ``reports_sent``: the handler says when the request went out (our aiohttp
        session's trace); otherwise the delay counts from the end of the wait.
        """
        if self.hosts is None:
            yield
            return
        slot = self.hosts.slot(host)
        async with slot:
            start = await slot.wait_turn()
            if self.hosts.started(slot, _HOLD.get()):
                self._wake()  # idle workers learn when the host is due next
            if start is None:
                yield
                return
            if not reports_sent:
                start()
            token = SENT.set(start)
            try:
                yield
            finally:
                SENT.reset(token)
                start()  # it failed before it was sent (or was never reported)

    async def _transfer(self, request: Request) -> Response:
        """The innermost step of the chain: politeness, then the handler (browser or aiohttp)."""
        if self._http is None:
            raise RuntimeError("Downloader.open() was not awaited")
        handler: DownloadHandler = self._http
        if request.render or self.settings.render:
            handler = self._renderer()
        host = request.host_key  # the one key of politeness, placement and robots.txt
        async with self._turn(host, self._own_session and handler is self._http):
            began = time.monotonic()
            response = await handler.fetch(request)
        took = time.monotonic() - began
        self.stats.bytes += len(response.body)
        self.stats.responded(response.status, took)
        if self.throttle.enabled:
            told = bool(response.headers.get("Retry-After"))
            self.throttle.observe(host, took, response.status, told)
        return response


def _nothing_sent(request: Request, exc: RequestError) -> bool:
    """Whether ``exc`` ended ``request`` before any of it went out: robots.txt forbade
    its first hop on its first attempt (a host queue's turn is then given back)."""
    return (
        isinstance(exc, RobotsDenied) and request.attempts <= 1 and exc.url == defrag(request.url)
    )


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
