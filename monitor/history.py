"""The last hours of each engine's spiders, in memory, for the dashboard's charts.

Fed by the status poller with each engine's ``GET /netdiscovery/spiders`` answer. Per
spider and per engine (the sum of its spiders) it keeps pages/s, items/s and errors/s
(failed requests), derived from the counters ``succeeded``, ``items`` and ``failed``
between two reads, in two tiers (:mod:`monitor.series`): the last ``points`` reads, and
one slot a minute over ``hours``. Everything is bounded: those rings, ``max_spiders``
spiders per engine, ``max_engines`` engines, and only engines still in the view. A
spider that is not running shows no rate (a finished one would otherwise keep its last
minute's pages/s for a minute): its summary says ``None`` and its chart gets a gap; so
does a counter that went back (a new run) and a first read.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Mapping
from typing import Any

from monitor.series import MAX_POINTS, Rates, Tier, rates_between, sum_rates

#: what the dashboard shows of a spider's status object
SPIDER_KEYS = ("name", "state", "succeeded", "failed", "items", "queue_size", "in_flight",
               "next_run", "last_error")  # fmt: skip
#: states in which a spider fetches nothing, so its last minute's pages/s would mislead
QUIET = frozenset({"idle", "starting", "paused", "stopped", "finished", "failed"})
#: the counters the rates come from, in the order of :data:`monitor.series.RATES`
COUNTERS = ("succeeded", "items", "failed")
#: a counter above this is not a count (it would also lose precision as a float)
MAX_COUNT = 2.0**53
#: two reads further apart than this give no rate: an average over them would mislead
MAX_GAP = 600.0
#: spans up to this many seconds are drawn from the reads, longer ones from the minutes
RECENT_SPAN = 600.0
MINUTE = 60.0


class Track:
    """Rates over time of one spider or one engine: its recent reads and its minutes."""

    __slots__ = ("minutes", "reads")

    def __init__(self, points: int, minutes: int) -> None:
        self.reads = Tier(points)
        self.minutes = Tier(minutes, MINUTE)

    def add(self, at: float, seconds: float, rates: Rates | None) -> None:
        self.reads.add(at, seconds, rates)
        self.minutes.add(at, seconds, rates)

    def rows(self, now: float, span: float) -> list[list[float | None]]:
        """The last ``span`` seconds as at most :data:`MAX_POINTS` rows."""
        step = step_for(span)
        if not step:
            return self.reads.rows(now - span)
        return self.minutes.rows(now - span, step)


def step_for(span: float) -> float:
    """Seconds per point of a ``span``: 0 (one per read) up to :data:`RECENT_SPAN`, else
    whole minutes, enough that the span fits in :data:`MAX_POINTS` points."""
    if span <= RECENT_SPAN:
        return 0.0
    return MINUTE * max(1, math.ceil(span / MINUTE / MAX_POINTS))


class SpiderTrack:
    """One spider's latest summary, its last counters and its rates."""

    __slots__ = ("counters", "read_at", "summary", "track")

    def __init__(self, points: int, minutes: int) -> None:
        self.track = Track(points, minutes)
        self.summary: dict[str, Any] = {}
        self.counters: Rates | None = None
        self.read_at: float | None = None

    def update(self, status: dict[str, Any], at: float) -> Rates | None:
        """Take one read of the spider; its rates since the previous read."""
        self.summary = {key: status.get(key) for key in SPIDER_KEYS}
        if self.summary["state"] == "finished":
            self.summary["queue_size"] = 0  # its last count is from before it ended
        running = status.get("state") not in QUIET
        rate = _finite(status.get("pages_per_second"))
        self.summary["pages_per_second"] = rate if running else None
        counters = _counters(status)
        seconds = at - self.read_at if self.read_at is not None else 0.0
        rates = rates_between(self.counters, counters, seconds, MAX_GAP) if running else None
        self.counters, self.read_at = counters, at
        self.track.add(at, seconds, rates)
        return rates


def _finite(value: object) -> float | None:
    """A number from an answer as a float; None for anything else (NaN, bools, text, an
    integer too large for a float)."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def _counters(status: dict[str, Any]) -> Rates | None:
    """The spider's three counters, or None unless each is a count."""
    pages, items, errors = (_finite(status.get(key)) for key in COUNTERS)
    if pages is None or items is None or errors is None:
        return None
    if not all(0 <= v <= MAX_COUNT for v in (pages, items, errors)):
        return None
    return (pages, items, errors)


class EngineTrack:
    """One engine's spiders as last read, and the rates of all of them together."""

    __slots__ = ("read_at", "spiders", "track")

    def __init__(self, points: int, minutes: int) -> None:
        self.track = Track(points, minutes)
        self.spiders: dict[str, SpiderTrack] = {}
        self.read_at: float | None = None


class History:
    """Per engine and per spider: the latest summaries and bounded rate series."""

    def __init__(
        self, points: int = 120, max_spiders: int = 200, hours: float = 6.0,
        max_engines: int = 1000,
    ) -> None:  # fmt: skip
        if not 0 < points <= MAX_POINTS:
            raise ValueError(f"points must be within 1-{MAX_POINTS}, not {points}")
        self.points = points
        self.max_spiders = max_spiders
        self.max_engines = max_engines
        self.minutes = max(1, math.ceil(hours * 60))
        self._engines: dict[str, EngineTrack] = {}

    def __len__(self) -> int:
        return len(self._engines)

    def record(self, engine_id: str, body: Any, at: float | None = None) -> None:
        """Take one poll's answer (a list of spider status objects; anything else is ignored)."""
        if not isinstance(body, list):
            return
        engine = self._engines.get(engine_id)
        if engine is None:
            if len(self._engines) >= self.max_engines:
                return
            engine = self._engines[engine_id] = EngineTrack(self.points, self.minutes)
        when = time.time() if at is None else at
        tracks: dict[str, SpiderTrack] = {}
        rates: list[Rates | None] = []
        for status in body:
            name = status.get("name") if isinstance(status, dict) else None
            if not isinstance(name, str) or name in tracks or len(tracks) >= self.max_spiders:
                continue
            track = engine.spiders.get(name) or SpiderTrack(self.points, self.minutes)
            rates.append(track.update(status, when))
            tracks[name] = track
        seconds = when - engine.read_at if engine.read_at is not None else 0.0
        engine.track.add(when, seconds, sum_rates(rates))
        engine.spiders, engine.read_at = tracks, when

    def keep_only(self, present: Iterable[str]) -> None:
        """Forget engines that left the view."""
        keep = set(present)
        for engine_id in [e for e in self._engines if e not in keep]:
            del self._engines[engine_id]

    def engine(self, engine_id: str) -> list[dict[str, Any]]:
        """The engine's spider summaries as last read (kept for it once it left the view)."""
        engine = self._engines.get(engine_id)
        return [dict(t.summary) for t in engine.spiders.values()] if engine else []

    def read_at(self, engine_id: str) -> float | None:
        """When the engine's spiders were last read (None: never)."""
        engine = self._engines.get(engine_id)
        return None if engine is None else engine.read_at

    def engine_rate(self, engine_id: str) -> float | None:
        """Pages/s of the engine's running spiders (None before its first read)."""
        if engine_id not in self._engines:
            return None
        spiders = self._engines[engine_id].spiders.values()
        return round(_sum(t.summary["pages_per_second"] for t in spiders), 2)

    def to_json(
        self,
        crawls: Mapping[tuple[str, str], str] | None = None,
        gone: Iterable[Any] = (),
        span: float = RECENT_SPAN,
        now: float | None = None,
    ) -> dict[str, Any]:
        """What ``GET /netdiscovery/monitor/spiders`` answers: engines and cluster totals.

        ``crawls`` names the shared frontier of ``(engine, spider)``; ``gone`` holds the
        last spider summaries of engines that left, whose pages the totals keep. Each
        series covers the ``span`` seconds before ``now``, at most ``MAX_POINTS`` rows.
        """
        at = time.time() if now is None else now
        engines = {
            engine_id: {
                "read_at": engine.read_at,
                "series": engine.track.rows(at, span),
                "spiders": [
                    {**t.summary, "series": t.track.rows(at, span)} for t in engine.spiders.values()
                ],
            }
            for engine_id, engine in self._engines.items()
        }
        totals = self.totals(crawls or {}, list(gone))
        return {"points": self.points, "now": at, "span": span, "step": step_for(span),
                "engines": engines, "totals": totals}  # fmt: skip

    def totals(
        self, crawls: Mapping[tuple[str, str], str], gone: list[dict[str, Any]]
    ) -> dict[str, Any]:
        """Cluster totals: counts by state, pages and failures (with those of engines that
        left), the queue (a shared frontier once), the rate."""
        pairs = [
            (e, t.summary) for e, engine in self._engines.items() for t in engine.spiders.values()
        ]
        summaries = [s for _, s in pairs]
        states: dict[str, int] = {}
        for summary in summaries:
            states[str(summary["state"])] = states.get(str(summary["state"]), 0) + 1
        shared: dict[str, float] = {}  # crawl -> its queue, read by any of its engines
        private = 0.0
        for engine_id, summary in pairs:
            crawl = crawls.get((engine_id, str(summary["name"])))
            queue = _sum([summary["queue_size"]])
            if crawl is None:
                private += queue
            else:
                shared[crawl] = max(shared.get(crawl, 0.0), queue)
        return {
            "engines": len(self._engines),
            "spiders": len(summaries),
            "states": states,
            "pages": _sum(s["succeeded"] for s in summaries + gone),
            "failed": _sum(s["failed"] for s in summaries + gone),
            "queue": private + sum(shared.values()),
            "pages_per_second": round(_sum(s["pages_per_second"] for s in summaries), 2),
        }


def _sum(values: Iterable[Any]) -> float:
    return sum(v for v in values if isinstance(v, int | float) and not isinstance(v, bool))
