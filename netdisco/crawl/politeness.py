"""A host's politeness, with one owner: when a request to it may start, how long the
host rests after a 429, a 503 or a failure, and when it is given up.

This process keeps each host's slots, delay and queue of requests set aside
(``crawl.hosts.ReadyHosts``), and a retry sleeps out its back-off here, the whole host
resting with it. A shared crawl keeps it so too: each host is owned by one engine at a
time (``frontiers.redis.owned``), which applies this same politeness to it; a redirect
to a host another engine owns goes to that engine as a request (a ``Deferred``).

The downloader sees a narrow face, as Scrapy's per-host ``Slot``: ``fetching`` around
a request's whole download, ``turn`` around each transfer (when may it start?) and
``ended`` for how anything ended (an answer, a failed attempt, a redirect, robots.txt
read, the download's outcome). Where each outcome goes (the throttle, the host's
errors, its rest) stays behind the face: the host's delay and slots (``Throttle``: the
setting, the ``hosts`` table, Crawl-delay, autothrottle), its failures in a row and
giving up (``HostErrors``), and the back-off a retry waits. Every piece is keyed by
``Request.host_key``, the one host key of the crawl.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import math
import random
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import TYPE_CHECKING, Any

import structlog

from netdisco.crawl.hosts import Hold, Placement, ReadyHosts
from netdisco.crawl.lru import LRU
from netdisco.crawl.redirects import hand_off
from netdisco.crawl.response import Response
from netdisco.crawl.throttle import SLOW_DOWN, Throttle
from netdisco.crawl.transport import SENT
from netdisco.exceptions import (
    DownloadFailed,
    HostGivenUp,
    HttpStatusError,
    RequestError,
)

if TYPE_CHECKING:
    from netdisco.crawl.request import Request
    from netdisco.crawl.settings import Settings
    from netdisco.frontiers.base import Frontier

log = structlog.get_logger(__name__)

#: the hold of the request this task downloads (``ReadyHosts``): its turn ends the wait
_HOLD: contextvars.ContextVar[Hold | None] = contextvars.ContextVar("hold", default=None)


@dataclass(frozen=True, slots=True)
class Deferred:
    """Not a failure and not a response: the request waits in its host's queue in the
    frontier, which holds it (acknowledging it loses nothing). ``hop``: a redirect to
    another host, to be admitted as a request of its own. ``give_back``: nothing holds
    it; it goes back to the frontier unacknowledged (its lease was fenced)."""

    reason: str
    hop: Request | None = None
    give_back: bool = False


class HostErrors:
    """Failures in a row per host, and the hosts given up after ``host_error_limit`` of
    them: their requests fail at once, so a dead host ends."""

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


@dataclass(frozen=True, slots=True)
class Answer:
    """One transfer's answer, as the host's pace learns from it: its status, how long it
    took and whether it said how long to wait (Retry-After)."""

    status: int
    latency: float
    told: bool = False


@dataclass(frozen=True, slots=True)
class Arrived:
    """The answer to a hop of a request arrived; ``hop``: the redirect it asks for
    (after ``count`` hops), None when it is the response."""

    hop: Request | None = None
    count: int = 0


@dataclass(frozen=True, slots=True)
class Failed:
    """An attempt that did not succeed: an error status and its headers, or no answer
    (``status`` None). ``again``: it is retried after the back-off, the host resting
    with it; else only a status that asks to slow down rests the host."""

    status: int | None
    headers: Mapping[str, str]
    again: bool


@dataclass(frozen=True, slots=True)
class RobotsRead:
    """The host's robots.txt was read (its transfer ended at ``at``, monotonic; its
    Crawl-delay, if any): a request that took no turn, so the next waits the delay."""

    crawl_delay: float | None
    at: float


#: how something of a request ended (``Politeness.ended``); a ``Response``: the whole
#: download (a ``RequestError`` that ends it is seen by ``Politeness.fetching``)
Outcome = Answer | Arrived | Failed | RobotsRead | Response


class Politeness:
    """Each host's slots, delay and requests set aside (``ReadyHosts``), in this process.

    ``blocked(url)``: its robots.txt does not answer yet; ``denied(url)``: robots.txt
    is known to forbid it. ``wake``: tells idle workers a host became due. ``owns(host)``:
    whether this engine may start requests of ``host`` (hosts owned by one engine each,
    ``frontiers.redis.owned``): a redirect to a host another engine owns is queued for it.

    The downloader's face is ``fetching``, ``turn`` and ``ended``; the crawl's workers
    place requests onto hosts (``place``, ``ready``, ...).
    """

    def __init__(
        self,
        settings: Settings,
        *,
        blocked: Callable[[str], bool],
        denied: Callable[[str], bool],
        wake: Callable[[], None],
        owns: Callable[[str], bool] = lambda host: True,
    ) -> None:
        self.settings = settings
        self.throttle = Throttle(settings)
        self.host_errors = HostErrors(settings.host_error_limit, settings.host_cache_size)
        self._wake, self._owns = wake, owns
        self.hosts = ReadyHosts(
            self.throttle,
            size=settings.host_cache_size,
            limit=4 * settings.concurrency,
            blocked=blocked,
            denied=denied,
        )

    # -- the downloader's face -----------------------------------------------------------

    @contextlib.contextmanager
    def fetching(self, request: Request) -> Iterator[None]:
        """While ``request`` downloads (its retries included): ``HostGivenUp`` at once if
        its host was given up, and a ``RequestError`` that ends it counts against its
        host (``HostErrors``); its slot frees after."""
        token = _HOLD.set(self.hosts.hold_of(request))
        try:
            self.host_errors.check(request)
            yield
        except RequestError as exc:
            self.host_errors.record(request, exc)
            raise
        finally:
            self.release(request)
            _HOLD.reset(token)

    @contextlib.asynccontextmanager
    async def turn(self, request: Request, reports_sent: bool) -> AsyncIterator[None]:
        """The host's slot and delay around the innermost transfer (``reports_sent``: the
        handler says when the request went out; otherwise the delay counts from the end
        of the wait); the delay also counts from the answer's end."""
        slot = self.hosts.slot(request.host_key)
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
                slot.answered()

    async def ended(self, request: Request, outcome: Outcome) -> Deferred | None:
        """How something of ``request`` ended (``Outcome``); a retry waits its back-off
        here, and a ``Deferred`` says a redirect goes to its host's owner instead."""
        match outcome:
            case Answer(status, latency, told):
                self.throttle.observe(request.host_key, latency, status, told)
            case Arrived(hop, count):
                if hop is not None and not self._owns(hop.host_key):
                    hop = hand_off(request, hop, count, self.settings.max_redirects)
                    return Deferred(f"redirect to {hop.url}, queued for its host", hop)
            case Failed():
                await self._failed(request, outcome)
            case RobotsRead(crawl_delay, at):
                self.throttle.crawl_delay(request.host_key, crawl_delay)
                self.hosts.slot(request.host_key).went_out(at)  # the next turn waits the delay
            case _:  # the response: the host answered
                self.host_errors.record(request, None)
        return None

    async def _failed(self, request: Request, failed: Failed) -> None:
        """The wait a failed attempt costs: the retry's back-off (the host resting with
        it), or for one not retried the rest a 429 or a 503 asks of the host."""
        if failed.status is None:
            delay, told = self.backoff(request), False
        else:
            delay, told = self.told_to_wait(request, failed.headers)
        if failed.again:
            self._rest(request, delay, told)
            await asyncio.sleep(delay)
        elif failed.status in SLOW_DOWN:
            self._rest(request, delay, told)

    def _rest(self, request: Request, delay: float, told: bool = False) -> None:
        """The whole host waits ``delay`` (a 429, a 503, a failure), not only
        ``request``; ``told``: the server said how long, and its word replaces the host's
        own delay."""
        slot = self.hosts.peek(request.host_key)
        if slot is not None:
            slot.rest(delay, told)

    def backoff(self, request: Request) -> float:
        """Exponential backoff with full jitter around the nominal delay, capped; it
        doubles with each attempt and with each failure in a row of the host before."""
        exponent = request.attempts - 1 + self.host_errors.row(request)
        nominal = self.settings.retry_backoff * (2 ** min(exponent, 30))
        jittered: float = nominal * random.uniform(0.5, 1.5)
        return min(jittered, self.settings.retry_max_delay)

    def told_to_wait(self, request: Request, headers: Mapping[str, str]) -> tuple[float, bool]:
        """How long to wait before a retry, and whether the server said so: the
        Retry-After asked for (capped), else the backoff."""
        asked = retry_after(headers, self.settings.retry_max_delay)
        return (self.backoff(request), False) if asked is None else (asked, True)

    # -- the scheduling of requests onto hosts (the crawl's workers) --------------------

    def place(self, request: Request) -> Placement:
        """Whether a request just taken starts now (``go``), waits aside (``parked``) or
        goes back to the frontier (``back``)."""
        return self.hosts.place(request)

    def ready(self) -> Request | None:
        """A request set aside whose host is due now, first due first."""
        return self.hosts.ready()

    def taking(self) -> bool:
        """Whether a worker may take another request from the frontier."""
        return self.hosts.taking()

    def next_due(self) -> float | None:
        """Seconds until a host with requests aside may be due (None: none waits)."""
        return self.hosts.next_due()

    def release(self, request: Request) -> None:
        """``request`` is over (fetched, failed, or skipped by a re-crawl): its slot
        frees (the crawl wakes idle workers after the scrape)."""
        self.hosts.release(request)

    def idle_share(self) -> float | None:
        """Slot-time free while work waited and no delay ran (``ReadyHosts.idle_share``)."""
        return self.hosts.idle_share()

    def parked_by_host(self) -> dict[str, int]:
        """How many requests are set aside for each host."""
        return self.hosts.parked_by_host()

    def drain(self) -> list[Request]:
        """Every request set aside (to hand back to the frontier on close)."""
        return self.hosts.drain()


def politeness_for(
    settings: Settings,
    frontier: Frontier[Any],
    *,
    blocked: Callable[[str], bool],
    denied: Callable[[str], bool],
    wake: Callable[[], None],
) -> Politeness:
    """This process's politeness, on the hosts the frontier says are ours; the frontier
    learns the crawl's delay and where the hosts' paces are kept (a host that moves
    takes its pace with it)."""
    frontier.set_politeness(settings.download_delay, settings.per_host_concurrency)
    politeness = Politeness(settings, blocked=blocked, denied=denied, wake=wake, owns=frontier.owns)
    frontier.use_paces(politeness.hosts)
    return politeness
