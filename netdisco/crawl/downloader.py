"""Step 3 of the data flow: fetch a request politely, retrying what is worth retrying.

One aiohttp session for the spider. Per host: a concurrency cap and a delay that
gates when a request may *start*. Redirects are followed by hand so that every
hop is re-checked against scope and robots.txt, and loops are caught.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import deque
from collections.abc import Callable, Mapping
from email.utils import parsedate_to_datetime
from urllib.parse import urljoin, urlsplit

import aiohttp

from netdisco.crawl.lru import LRU
from netdisco.crawl.request import Request
from netdisco.crawl.response import Response
from netdisco.crawl.robots import RobotsCache
from netdisco.crawl.settings import Settings
from netdisco.crawl.stats import Stats
from netdisco.crawl.urls import canonical_url, check_url
from netdisco.exceptions import (
    DownloadFailed,
    HttpStatusError,
    InvalidURL,
    OutOfScope,
    ResponseTooLarge,
    RobotsDenied,
    TooManyRedirects,
)

RETRY_STATUSES = frozenset({408, 429, *range(500, 600)})
#: credentials that must not follow a redirect to another origin (as requests, curl, browsers)
CREDENTIAL_HEADERS = frozenset({"authorization", "cookie", "proxy-authorization"})
REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
#: network failures worth another try; DNS failures are not (the name will not appear)
RETRY_ERRORS = (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError, TimeoutError)

ScopeCheck = Callable[[str, str], "str | None"]


class HostSlot:
    """Politeness for one host: how many requests at once, and when the next may start."""

    __slots__ = ("next_start", "semaphore", "users")

    def __init__(self, concurrency: int) -> None:
        self.semaphore = asyncio.Semaphore(concurrency)
        self.next_start = 0.0
        self.users = 0  # requests holding or waiting for the semaphore

    async def __aenter__(self) -> None:
        self.users += 1
        try:
            await self.semaphore.acquire()
        except BaseException:
            self.users -= 1
            raise

    async def __aexit__(self, *exc_info: object) -> None:
        self.semaphore.release()
        self.users -= 1

    def idle(self) -> bool:
        """Nobody uses it and its delay has run out: forgetting it changes nothing."""
        return self.users == 0 and self.next_start <= time.monotonic()

    async def wait_turn(self, delay: float) -> None:
        """Sleep until this host's next start time, and book the one after it."""
        if delay <= 0:
            return
        now = time.monotonic()
        start = max(now, self.next_start)
        self.next_start = start + delay
        if start > now:
            await asyncio.sleep(start - now)


class Parking:
    """Requests set aside while their host is at its limit, so that a worker serves
    another host instead of waiting: one slow host must not hold every worker.

    At most ``limit`` wait here; past that a worker waits for the host as before, which
    keeps memory bounded when the frontier holds nothing but one busy host.
    """

    def __init__(self, downloader: Downloader, limit: int) -> None:
        self.downloader = downloader
        self.limit = limit
        self._hosts: dict[str, deque[Request]] = {}
        self._count = 0

    def park(self, request: Request) -> bool:
        """Set ``request`` aside if its host is busy or its robots.txt unreachable (and
        there is room); say if it was."""
        host = urlsplit(request.url).netloc
        if self._count >= self.limit or not self.downloader.busy(host, request.url):
            return False
        self._hosts.setdefault(host, deque()).append(request)
        self._count += 1
        return True

    def ready(self) -> Request | None:
        """A parked request whose host has room now, oldest first per host."""
        if not self._count:
            return None
        for host, waiting in self._hosts.items():
            if not self.downloader.busy(host, waiting[0].url):
                request = waiting.popleft()
                if not waiting:
                    del self._hosts[host]
                self._count -= 1
                return request
        return None

    def drain(self) -> list[Request]:
        """Every parked request (to hand back to the frontier on close)."""
        requests = [r for waiting in self._hosts.values() for r in waiting]
        robots = self.downloader.robots
        if robots is not None:  # handed back while their robots.txt did not answer
            self.downloader.stats.robots_deferred += sum(
                robots.unreachable(r.url) for r in requests
            )
        self._hosts.clear()
        self._count = 0
        return requests


def retry_after(headers: Mapping[str, str], cap: float) -> float | None:
    """Seconds asked for by a Retry-After header (delta or HTTP date), capped."""
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
    return min(max(seconds, 0.0), cap)


class Downloader:
    """Fetches requests under global and per-host limits; see the module docstring."""

    def __init__(self, settings: Settings, stats: Stats, scope: ScopeCheck) -> None:
        self.settings = settings
        self.stats = stats
        self.scope = scope
        self._slots: LRU[str, HostSlot] = LRU(settings.host_cache_size, HostSlot.idle)
        self._session: aiohttp.ClientSession | None = None
        self.robots: RobotsCache | None = None

    async def open(self) -> None:
        """Create the session (inside the running loop)."""
        s = self.settings
        connector = aiohttp.TCPConnector(limit=s.concurrency, limit_per_host=0, ttl_dns_cache=300)
        self._session = aiohttp.ClientSession(
            connector=connector,
            timeout=aiohttp.ClientTimeout(total=s.timeout, sock_connect=s.connect_timeout),
            headers={"User-Agent": s.user_agent},
            cookie_jar=aiohttp.DummyCookieJar(),
        )
        if s.obey_robots:
            self.robots = RobotsCache(self._session, s)

    async def close(self) -> None:
        """Close the session and its connections."""
        if self.robots is not None:
            await self.robots.close()
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def fetch(self, request: Request) -> Response:
        """Download ``request`` with retries; raise a ``RequestError`` when it cannot be had."""
        s = self.settings
        while True:
            request.attempts += 1
            try:
                response = await self._follow(request)
            except RETRY_ERRORS as exc:
                if request.attempts > s.retries or isinstance(exc, aiohttp.ClientConnectorDNSError):
                    raise DownloadFailed(_describe(exc), url=request.url) from exc
                delay = self._backoff(request.attempts)
            except aiohttp.ClientError as exc:  # a malformed answer: retrying will not mend it
                raise DownloadFailed(_describe(exc), url=request.url) from exc
            else:
                if response.status < 400:
                    return response
                if response.status not in RETRY_STATUSES or request.attempts > s.retries:
                    raise HttpStatusError(
                        f"HTTP {response.status}", url=response.url, status=response.status
                    )
                asked = retry_after(response.headers, s.retry_max_delay)
                delay = self._backoff(request.attempts) if asked is None else asked
            self.stats.retried += 1
            await asyncio.sleep(delay)

    def _backoff(self, attempt: int) -> float:
        """Exponential backoff with full jitter around the nominal delay, capped."""
        nominal = self.settings.retry_backoff * (2 ** (attempt - 1))
        jittered: float = nominal * random.uniform(0.5, 1.5)
        return min(jittered, self.settings.retry_max_delay)

    async def _follow(self, request: Request) -> Response:
        """One attempt: the request and its redirect hops, each checked before it is made."""
        url, method, body, headers = request.url, request.method, request.body, request.headers
        visited: set[str] = set()
        for hop in range(self.settings.max_redirects + 1):
            await self._check(url, hop, request.proxy or self.settings.proxy)
            key = canonical_url(url)
            if key in visited:
                raise TooManyRedirects(f"redirect loop back to {url}", url=request.url)
            visited.add(key)
            response = await self._get(request, url, method, body, headers)
            location = response.headers.get("Location")
            if response.status not in REDIRECT_STATUSES or not location:
                return response
            url = _join(url, location)
            headers = _headers_for(request.url, url, headers)
            if response.status in (301, 302, 303) and method != "HEAD":
                method, body = "GET", None
        raise TooManyRedirects(
            f"more than {self.settings.max_redirects} redirects", url=request.url
        )

    async def _check(self, url: str, hop: int, proxy: str | None) -> None:
        """A redirect hop must be a valid URL in scope; every hop must pass robots.txt."""
        if hop:
            reason, host = check_url(url)
            if reason is not None:
                raise InvalidURL(f"redirect to {url!r}: {reason}", url=url)
            reason = self.scope(url, host)
            if reason is not None:
                raise OutOfScope(f"redirect to {url}: {reason}", url=url)
        if self.robots is not None and not await self._robots_allow(url, proxy):
            raise RobotsDenied("disallowed by robots.txt", url=url)

    async def _robots_allow(self, url: str, proxy: str | None) -> bool:
        """robots.txt's answer; while it is unreachable the request waits, it does not fail."""
        assert self.robots is not None
        try:
            return await self.robots.allowed(url, proxy)
        except asyncio.CancelledError:
            if self.robots.unreachable(url):  # the spider stops: handed back, and counted
                self.stats.robots_deferred += 1
            raise

    def busy(self, host: str, url: str | None = None) -> bool:
        """Whether ``host`` (a netloc) already has ``per_host_concurrency`` requests going,
        or the robots.txt for ``url`` is unreachable (a request would only wait)."""
        if url is not None and self.robots is not None and self.robots.unreachable(url):
            return True
        slot = self._slots.peek(host)
        return slot is not None and slot.semaphore.locked()

    def _slot(self, url: str) -> HostSlot:
        key = urlsplit(url).netloc
        slot = self._slots.get(key)
        if slot is None:
            slot = self._slots.put(key, HostSlot(self.settings.per_host_concurrency))
        return slot

    async def _get(
        self, request: Request, url: str, method: str, body: bytes | None, headers: dict[str, str]
    ) -> Response:
        assert self._session is not None, "Downloader.open() was not awaited"
        slot = self._slot(url)
        async with slot:
            await slot.wait_turn(self.settings.download_delay)
            try:
                async with self._session.request(
                    method,
                    url,
                    headers=headers or None,
                    data=body,
                    proxy=request.proxy or self.settings.proxy,
                    allow_redirects=False,
                ) as resp:
                    data = await self._read(resp, url)
            except (aiohttp.InvalidURL, ValueError) as exc:
                raise InvalidURL(f"cannot request {url!r}: {exc}", url=url) from exc
        self.stats.bytes += len(data)
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


def _join(base: str, location: str) -> str:
    """The absolute redirect target; a Location that cannot be parsed is an InvalidURL."""
    try:
        return urljoin(base, location)
    except ValueError as exc:
        raise InvalidURL(f"redirect to {location!r}: {exc}", url=base) from exc


def _origin(url: str) -> tuple[str, str, int | None]:
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    try:
        port = parts.port or {"http": 80, "https": 443}.get(scheme)
    except ValueError:  # an invalid port: an origin of its own
        port = -1
    return scheme, (parts.hostname or "").rstrip("."), port


def _headers_for(first: str, target: str, headers: dict[str, str]) -> dict[str, str]:
    """The headers a redirect hop to ``target`` may carry: credentials only within the
    origin (scheme, host, port) of the request's own URL ``first``; once dropped, they
    stay dropped even if a later hop comes back."""
    if _origin(first) == _origin(target):
        return headers
    return {k: v for k, v in headers.items() if k.lower() not in CREDENTIAL_HEADERS}


def _describe(exc: BaseException) -> str:
    """A readable reason for a network failure (TimeoutError has no message)."""
    if isinstance(exc, TimeoutError):
        return "timed out"
    return f"{type(exc).__name__}: {exc}"
