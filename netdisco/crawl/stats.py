"""Per-spider counters: plain integers, cheap enough to bump on every request.

Besides the counters, the requests in flight per host (``begin``/``end``) and the
requests the downloader set aside per host (``parked``, a gauge the crawl's ticker
copies in) make ``busiest``: the hosts where requests wait their turn, for the
live display (``netdisco.progress``) and, through ``snapshot``, a ``-j N`` parent.
"""

from __future__ import annotations

import time
from bisect import bisect_left
from collections.abc import Iterable, Mapping
from typing import Any

from netdisco.exceptions import (
    DownloadFailed,
    DuplicateRedirect,
    HttpStatusError,
    InvalidURL,
    MiddlewareError,
    OutOfScope,
    RequestError,
    ResponseTooLarge,
    RobotsDenied,
    TransferFailed,
    TransferTimeout,
)

#: request outcomes, as counted in ``Stats.outcomes`` and Prometheus' ``outcome`` label
OUTCOMES = (
    "succeeded",
    "failed",
    "retried",
    "filtered",
    "invalid",
    "robots_blocked",
    "too_large",
    "not_modified",
    "age_skipped",
)
#: the counters a resumed crawl carries on from (``totals``, ``restore``)
TOTALS = (
    "scheduled",
    *OUTCOMES,
    "items",
    "dropped_items",
    "items_invalid",
    "pipeline_errors",
    "callback_errors",
    "bytes",
)
#: what several processes of one crawl add up (``merge``): the totals and the rest
SUMMED = (
    *TOTALS,
    "in_flight",
    "items_discarded",
    "robots_deferred",
    "middleware_errors",
    "render_timeouts",
)


def _summed(counts: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """Counts by name, added up over several processes."""
    total: dict[str, int] = {}
    for part in counts:
        for name, count in dict(part).items():
            total[str(name)] = total.get(str(name), 0) + int(count)
    return total


class Rate:
    """Events per second over the last minute, in one-second buckets.

    Until a minute has passed, the rate is over the time since it began, so a
    young crawl does not read as slow.
    """

    __slots__ = ("_born", "_buckets", "_last")

    def __init__(self) -> None:
        self._buckets = [0] * 60
        self._born = time.monotonic()
        self._last = int(self._born)

    def _advance(self, now: int) -> None:
        gap = now - self._last
        if gap <= 0:
            return
        for step in range(1, min(gap, 60) + 1):
            self._buckets[(self._last + step) % 60] = 0
        self._last = now

    def add(self, count: int = 1) -> None:
        """Count ``count`` events now."""
        now = int(time.monotonic())
        self._advance(now)
        self._buckets[now % 60] += count

    def per_second(self, window: int = 60) -> float:
        """Mean rate over the last ``window`` seconds (or since it began, if younger)."""
        clock = time.monotonic()
        now = int(clock)
        self._advance(now)
        total = sum(self._buckets[(now - back) % 60] for back in range(window))
        # the current second is partial: the span is the window up to now, or the age
        span = min(float(window - 1) + (clock - now), clock - self._born)
        return total / span if span > 0 else 0.0


#: hosts a snapshot names (``busiest``) and how long a host name it keeps may be
BUSIEST = 8
HOST_CHARS = 300


def _host_counts(rows: Any) -> Iterable[tuple[str, int, int]]:
    """``[host, in_flight, parked]`` rows of another process's snapshot, checked and
    bounded: at most ``BUSIEST`` rows, names cut to ``HOST_CHARS``, counts >= 0; a
    row of any other shape is skipped."""
    if not isinstance(rows, list):
        return
    for row in rows[:BUSIEST]:
        if not (isinstance(row, list) and len(row) == 3 and isinstance(row[0], str)):
            continue
        host, flying, parked = row
        if all(isinstance(n, int) and not isinstance(n, bool) and n >= 0
               for n in (flying, parked)):  # fmt: skip
            yield host[:HOST_CHARS], flying, parked


#: upper bounds (seconds) of the download latency histogram's buckets; +Inf is implied
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class Latency:
    """A fixed-bucket histogram: one bisect and two additions per observation.

    ``counts[i]`` counts the observations in bucket ``i`` alone (the last one is
    +Inf); the exposition makes them cumulative at scrape time, not per request.
    """

    __slots__ = ("counts", "total")

    def __init__(self) -> None:
        self.counts = [0] * (len(LATENCY_BUCKETS) + 1)
        self.total = 0.0

    def observe(self, seconds: float) -> None:
        """Count one download that took ``seconds``."""
        self.counts[bisect_left(LATENCY_BUCKETS, seconds)] += 1
        self.total += seconds

    def cumulative(self) -> list[tuple[str, int]]:
        """``(le, count)`` pairs as Prometheus wants them, ``+Inf`` last."""
        pairs, running = [], 0
        for bound, count in zip((*map(str, LATENCY_BUCKETS), "+Inf"), self.counts, strict=True):
            running += count
            pairs.append((bound, running))
        return pairs


class Stats:
    """What one spider did. ``outcomes`` feeds ``netdisco_requests_total{outcome}``."""

    def __init__(self) -> None:
        self.scheduled = 0
        self.in_flight = 0
        self.succeeded = 0
        self.failed = 0
        self.retried = 0
        self.filtered = 0
        self.invalid = 0
        self.robots_blocked = 0
        self.too_large = 0
        self.not_modified = 0  # 304 to a conditional request: the stored links were followed
        self.age_skipped = 0  # fetched within ``age``: not fetched, the stored links followed
        self.robots_deferred = 0  # handed back at stop: their robots.txt never answered
        self.items = 0
        self.dropped_items = 0
        self.items_discarded = 0  # yielded while no pipeline, feed or subscriber took them
        self.items_invalid = 0  # did not fit their schema (netdisco.crawl.schemas)
        self.invalid_fields: dict[str, int] = {}  # field -> invalid items it made
        self.pipeline_errors = 0
        self.callback_errors = 0
        self.spider_errors: dict[str, int] = {}  # callback errors by exception type
        self.pipeline_error_types: dict[str, int] = {}  # pipeline errors by exception type
        self.middleware_errors = 0
        self.render_timeouts = 0
        self.bytes = 0
        self.queue_size = 0
        self.seen = 0
        self.host_in_flight: dict[str, int] = {}  # host -> requests in flight (begin/end)
        self.parked: dict[str, int] = {}  # host -> requests set aside for it (a gauge)
        #: slot-time free while work waited and no delay ran (``ReadyHosts.idle_share``)
        self.idle_share: float | None = None
        self.last_error: str | None = None
        self.started = time.monotonic()
        self.pages = Rate()
        self.latency = Latency()  # every HTTP exchange: redirect hops and retries too
        self.statuses: dict[int, int] = {}  # responses by HTTP status code, as exchanged
        self.error_kinds: dict[str, int] = {}  # failed requests and callbacks by kind

    def begin(self, host: str) -> None:
        """One request to ``host`` is in flight (its download, its callback)."""
        self.in_flight += 1
        self.host_in_flight[host] = self.host_in_flight.get(host, 0) + 1

    def end(self, host: str) -> None:
        """A request ``begin`` counted is done; a host with none left is forgotten."""
        self.in_flight -= 1
        left = self.host_in_flight.get(host, 0) - 1
        if left > 0:
            self.host_in_flight[host] = left
        else:
            self.host_in_flight.pop(host, None)

    def busiest(self, count: int = BUSIEST) -> list[tuple[str, int, int]]:
        """``(host, in flight, parked)`` of the ``count`` hosts with the most requests in
        flight or waiting for their turn, busiest first."""
        hosts = self.host_in_flight.keys() | self.parked.keys()
        rows = [(h, self.host_in_flight.get(h, 0), self.parked.get(h, 0)) for h in hosts]
        rows.sort(key=lambda row: (-row[1] - row[2], row[0]))
        return rows[:count]

    def responded(self, status: int, seconds: float) -> None:
        """Count one HTTP response: its status code and how long it took."""
        self.statuses[status] = self.statuses.get(status, 0) + 1
        self.latency.observe(seconds)

    def restart_clock(self) -> None:
        """Start the clocks (elapsed, pages/s) now: the crawl begins."""
        self.started = time.monotonic()
        self.pages = Rate()

    @property
    def outcomes(self) -> dict[str, int]:
        """Requests by outcome."""
        return {name: getattr(self, name) for name in OUTCOMES}

    def totals(self) -> dict[str, int]:
        """The running totals, as a persistent frontier stores them."""
        return {name: getattr(self, name) for name in TOTALS}

    def restore(self, totals: dict[str, int]) -> None:
        """Carry on from the totals of an earlier run of the same crawl."""
        for name in TOTALS:
            setattr(self, name, int(totals.get(name, 0)))

    def snapshot(self) -> dict[str, Any]:
        """The counters another process adds up (``merge``): plain JSON."""
        return {
            **{name: getattr(self, name) for name in SUMMED},
            "queue_size": self.queue_size,
            "seen": self.seen,
            "error_kinds": dict(self.error_kinds),
            "invalid_fields": dict(self.invalid_fields),
            "spider_errors": dict(self.spider_errors),
            "pipeline_error_types": dict(self.pipeline_error_types),
            "last_error": self.last_error,
            "hosts": [list(row) for row in self.busiest()],
        }

    def merge(self, snapshots: Iterable[Mapping[str, Any]]) -> None:
        """Set the counters to the sum of several processes' ``snapshot``s (the gauges of
        the queue and the seen set: the largest, as each process reads the same frontier)."""
        parts = list(snapshots)
        for name in SUMMED:
            setattr(self, name, sum(int(part.get(name, 0)) for part in parts))
        self.queue_size = max((int(part.get("queue_size", 0)) for part in parts), default=0)
        self.seen = max((int(part.get("seen", 0)) for part in parts), default=0)
        self.error_kinds = _summed(part.get("error_kinds", {}) for part in parts)
        self.invalid_fields = _summed(part.get("invalid_fields", {}) for part in parts)
        self.spider_errors = _summed(part.get("spider_errors", {}) for part in parts)
        self.pipeline_error_types = _summed(part.get("pipeline_error_types", {}) for part in parts)
        errors = [part["last_error"] for part in parts if part.get("last_error")]
        self.last_error = str(errors[-1]) if errors else None
        self.host_in_flight, self.parked = {}, {}
        for part in parts:
            for host, flying, parked in _host_counts(part.get("hosts")):
                if flying:
                    self.host_in_flight[host] = self.host_in_flight.get(host, 0) + flying
                if parked:
                    self.parked[host] = self.parked.get(host, 0) + parked

    def count_failure(self, exc: RequestError) -> None:
        """Count a request that came to nothing under its outcome."""
        if isinstance(exc, RobotsDenied):
            self.robots_blocked += 1
        elif isinstance(exc, ResponseTooLarge):
            self.too_large += 1
        elif isinstance(exc, OutOfScope | DuplicateRedirect):
            self.filtered += 1
        elif isinstance(exc, InvalidURL):
            self.invalid += 1
        else:
            self.failed += 1
            self.count_error(error_kind(exc))
            if isinstance(exc, MiddlewareError):
                self.middleware_errors += 1

    def spider_error(self, exc: BaseException) -> None:
        """Count one error a spider's callback raised, by its exception type."""
        kind = type(exc).__name__
        self.callback_errors += 1
        self.spider_errors[kind] = self.spider_errors.get(kind, 0) + 1
        self.count_error(f"callback {kind}")

    def pipeline_error(self, exc: BaseException) -> None:
        """Count one error an item pipeline raised (not a ``DropItem``), by its type."""
        kind = type(exc).__name__
        self.pipeline_errors += 1
        self.pipeline_error_types[kind] = self.pipeline_error_types.get(kind, 0) + 1
        self.count_error(f"pipeline {kind}")

    def errors_by_type(self) -> dict[str, dict[str, int]]:
        """Callback and pipeline errors by exception type (``spider_status``, /metrics)."""
        return {"callback": dict(self.spider_errors), "pipeline": dict(self.pipeline_error_types)}

    def count_error(self, kind: str) -> None:
        """Count one error under ``kind`` (the closing summary's top errors)."""
        self.error_kinds[kind] = self.error_kinds.get(kind, 0) + 1

    def client_errors(self) -> int:
        """Failed requests the site answered with a 4xx status (``error_kind``'s
        ``HTTP 404``): it is up, and said there is nothing there."""
        return sum(n for kind, n in self.error_kinds.items() if kind.startswith(CLIENT_ERROR))

    def error(self, message: str) -> None:
        """Remember the latest error for the status endpoint."""
        self.last_error = message

    def as_dict(self) -> dict[str, Any]:
        """Every counter, for status objects and the summary line."""
        elapsed = max(time.monotonic() - self.started, 1e-9)
        return {
            "scheduled": self.scheduled,
            "in_flight": self.in_flight,
            **self.outcomes,
            "items": self.items,
            "dropped_items": self.dropped_items,
            "items_discarded": self.items_discarded,
            "items_invalid": self.items_invalid,
            "pipeline_errors": self.pipeline_errors,
            "callback_errors": self.callback_errors,
            "robots_deferred": self.robots_deferred,
            "middleware_errors": self.middleware_errors,
            "render_timeouts": self.render_timeouts,
            "bytes": self.bytes,
            "queue_size": self.queue_size,
            "seen": self.seen,
            "pages_per_second": round(self.pages.per_second(), 2),
            "idle_share": None if self.idle_share is None else round(self.idle_share, 4),
            "elapsed": round(elapsed, 3),
            "last_error": self.last_error,
        }

    def closing(self) -> dict[str, Any]:
        """The counters of the ``spider_closed`` line: not the last error, which was
        logged whole when it happened (once is enough)."""
        fields = self.as_dict()
        del fields["last_error"]
        return fields


#: how ``error_kind`` begins the kind of a 4xx answer
CLIENT_ERROR = "HTTP 4"


def error_kind(exc: BaseException) -> str:
    """What went wrong, in a few words a summary can count: ``HTTP 404``, ``timeout``,
    the transport's error (``ClientConnectorError``) or the exception's class."""
    if isinstance(exc, HttpStatusError):
        return f"HTTP {exc.status}"
    cause = exc.__cause__
    if isinstance(exc, DownloadFailed) and isinstance(cause, TransferFailed):
        if isinstance(cause, TransferTimeout) or isinstance(cause.__cause__, TimeoutError):
            return "timeout"
        return type(cause.__cause__ or cause).__name__
    return type(exc).__name__
