"""Spider and engine health rules: pure logic over successive observations.

The daemon hands :class:`Rules` each status poll of an engine (its spider list) and
each read of its znode data, with the time; each call returns the :class:`Trip`\\ s to
report, which become events through the usual hooks. Nothing here does I/O, so the
rules are tested with plain values.

Rules run on a clock as well as on reads: :meth:`Rules.tick` steps every lasting
condition with the latest observation, so a condition that holds while nothing new
is read (a loop stuck for good writes its znode once, then nothing) is still reported
once its time is up. The spider rules tick only while the engine answers its status
polls; an engine that does not answer is the engine rules' business.

Flap control: a condition that lasts (an error ratio, a low disk) must hold ``grace``
seconds before it is reported (a stalled loop ``loop_grace``: the engine's own
``loop_stall`` already waited; a stalled spider waits ``stall_after`` instead), and
once reported it is armed again only after it has been clear for ``rearm`` seconds,
so a figure wobbling around its threshold is one event, not one a poll. A run that
ended (failed, finished with too few items) is reported once, keyed by its
``started_at``. Every value read from an engine is checked for its type and bounded
before it counts; anything else counts as unknown.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from monitor.settings import RuleSettings
from netdisco.cluster.contract import EventType

#: at most this many spiders per engine and disks per engine are tracked
MAX_SPIDERS = 200
MAX_DISKS = 16
#: an error message is cut to this many characters
MAX_TEXT = 300
_NAME = 200
Figures = dict[str, Any]
#: a spider state change in the znode list -> the event that says so
CHANGES: dict[tuple[str | None, str], EventType] = {
    ("paused", "running"): EventType.SPIDER_RESUMED,
}
#: the rules about a run that ended (or went wrong): reported once a run, keyed by it
ENDED = frozenset({
    EventType.SPIDER_FAILED, EventType.SPIDER_FINISHED_EMPTY, EventType.SPIDER_ITEMS_INVALID
})  # fmt: skip
_ENTERED = {
    "running": EventType.SPIDER_STARTED,
    "paused": EventType.SPIDER_PAUSED,
    "stopped": EventType.SPIDER_STOPPED,
    "finished": EventType.SPIDER_FINISHED,
}


@dataclass(frozen=True)
class Trip:
    """One thing to report: which rule, on which engine (and spider), with the figures."""

    type: EventType
    engine_id: str
    spider: str | None
    figures: Figures


def count(value: Any) -> int | None:
    """A counter from an engine: a whole number >= 0 (bool refused), else None."""
    ok = isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 1 << 62
    return value if ok else None


def name(value: Any) -> str | None:
    """A spider, disk or state name: a short printable string, else None."""
    ok = isinstance(value, str) and 0 < len(value) <= _NAME and value.isprintable()
    return value if ok else None


def number(value: Any) -> float | None:
    """A finite number from an engine (bool refused), else None."""
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    return float(value) if ok and math.isfinite(value) else None


def text(value: Any) -> str | None:
    """A message from an engine, cut to :data:`MAX_TEXT` characters."""
    return value[:MAX_TEXT] if isinstance(value, str) else None


@dataclass
class Latch:
    """One lasting condition: since when it holds, whether it was reported, since when clear."""

    since: float | None = None
    fired: bool = False
    clear_since: float | None = None

    def step(self, holds: bool, now: float, grace: float, rearm: float) -> bool:
        """Whether the condition is to be reported now (at most once until re-armed)."""
        if holds:
            self.clear_since = None
            self.since = now if self.since is None else self.since
            if not self.fired and now - self.since >= grace:
                self.fired = True
                return True
            return False
        self.since = None
        if self.fired:
            self.clear_since = now if self.clear_since is None else self.clear_since
            if now - self.clear_since >= rearm:
                self.fired, self.clear_since = False, None
        return False


@dataclass
class SpiderWatch:
    """What the rules remember of one spider between polls."""

    ended: set[tuple[str, Any]] = field(default_factory=set)  # (rule, started_at) reported
    progress: tuple[int, float] | None = None  # (pages + failures, when that changed)
    window: deque[tuple[float, int, int]] = field(default_factory=deque)  # (at, pages, failed)
    stalled: Latch = field(default_factory=Latch)
    errors: Latch = field(default_factory=Latch)
    figures: Figures = field(default_factory=dict)  # the latest poll's, for the clock
    error_figures: Figures | None = None  # the latest window's share, when it is too high


@dataclass
class EngineWatch:
    """What the rules remember of one engine: its spiders, its loop, its disks, and the
    latest znode data and status answer (the clock steps the rules with them)."""

    spiders: dict[str, SpiderWatch] = field(default_factory=dict)
    stalled: Latch = field(default_factory=Latch)
    disks: dict[str, Latch] = field(default_factory=dict)
    data: Mapping[str, Any] | None = None
    answered: float | None = None


class Rules:
    """Every rule of ``[rules]``, over every engine's successive observations."""

    def __init__(self, settings: RuleSettings) -> None:
        self.settings = settings
        self._engines: dict[str, EngineWatch] = {}

    def forget(self, engine_id: str) -> None:
        """The engine left the view: its next appearance starts afresh."""
        self._engines.pop(engine_id, None)

    def keep_only(self, present: Iterable[str]) -> None:
        keep = set(present)
        for engine_id in [e for e in self._engines if e not in keep]:
            del self._engines[engine_id]

    def _watch(self, engine_id: str) -> EngineWatch:
        return self._engines.setdefault(engine_id, EngineWatch())

    # -- spiders, from a status poll ----------------------------------------------

    def spiders(self, engine_id: str, body: Any, now: float) -> list[Trip]:
        """One poll's spider list (anything else is ignored): what it trips."""
        if not isinstance(body, list):
            return []
        watch, trips, seen = self._watch(engine_id), [], set()
        watch.answered = now
        for status in body[:MAX_SPIDERS]:
            spider = name(status.get("name")) if isinstance(status, dict) else None
            if spider is None or spider in seen:
                continue
            seen.add(spider)
            track = watch.spiders.setdefault(spider, SpiderWatch())
            trips += [Trip(kind, engine_id, spider, figures)
                      for kind, figures in self._spider(track, status, now)]  # fmt: skip
        for gone in [s for s in watch.spiders if s not in seen]:
            del watch.spiders[gone]
        return trips

    def _spider(
        self, track: SpiderWatch, status: Mapping[str, Any], now: float
    ) -> list[tuple[EventType, Figures]]:
        state = name(status.get("state"))
        pages, failed = count(status.get("succeeded")), count(status.get("failed"))
        figures = {
            "state": state,
            "pages": pages,
            "failed": failed,
            "items": count(status.get("items")),
            "queue": count(status.get("queue_size")),
        }
        track.figures = figures
        out = self._ended(track, status, state, figures) + self._invalid(track, status, figures)
        if pages is not None and failed is not None:
            self._count_errors(track, pages, failed, now)
            if track.progress is None or track.progress[0] != pages + failed or state != "running":
                track.progress = (pages + failed, now)  # progress, or not running: start again
            out += self._lasting(track, now)
        return out

    def _lasting(self, track: SpiderWatch, now: float) -> list[tuple[EventType, Figures]]:
        """The spider's lasting conditions at ``now``: on a poll, and on the clock."""
        return self._error_ratio(track, now) + self._stalled(track, now)

    def _ended(
        self, track: SpiderWatch, status: Mapping[str, Any], state: str | None, figures: Figures
    ) -> list[tuple[EventType, Figures]]:
        run = number(status.get("started_at"))
        items, extra = figures["items"], Figures()
        if state == "failed":
            kind, extra = EventType.SPIDER_FAILED, {"error": text(status.get("last_error"))}
        elif state == "finished" and items is not None and items < self.settings.min_items:
            kind, extra = EventType.SPIDER_FINISHED_EMPTY, {"min_items": self.settings.min_items}
        else:
            return []
        if (kind.value, run) in track.ended:
            return []
        track.ended = {(kind.value, run)} | {k for k in track.ended if k[1] == run}
        return [(kind, {**figures, **extra, "started_at": run})]

    def _invalid(
        self, track: SpiderWatch, status: Mapping[str, Any], figures: Figures
    ) -> list[tuple[EventType, Figures]]:
        """Items that did not fit the spider's schema: reported once a run, as soon as
        their count reaches ``items_invalid`` (while the run goes on, not only at its end:
        a broken selector is worth knowing about before the crawl finishes)."""
        limit, invalid = self.settings.items_invalid, count(status.get("items_invalid"))
        run = number(status.get("started_at"))
        key = (EventType.SPIDER_ITEMS_INVALID.value, run)
        if limit <= 0 or invalid is None or invalid < limit or key in track.ended:
            return []
        track.ended = {key} | {k for k in track.ended if k[1] == run}
        counted = {"items_invalid": invalid, "threshold": limit, "started_at": run}
        return [(EventType.SPIDER_ITEMS_INVALID, {**figures, **counted})]

    def _count_errors(self, track: SpiderWatch, pages: int, failed: int, now: float) -> None:
        """A poll's counters into the window; the share of failures, when it is too high."""
        limit, window = self.settings.error_ratio, track.window
        if window and (pages < window[-1][1] or failed < window[-1][2]):
            window.clear()  # counters went back: a new run
        window.append((now, pages, failed))
        while len(window) > 1 and now - window[1][0] >= self.settings.error_window:
            window.popleft()  # keep one sample at or before the window's start
        then, pages0, failed0 = window[0]
        requests = (pages - pages0) + (failed - failed0)
        ratio = (failed - failed0) / requests if requests else 0.0
        holds = limit > 0 and requests >= self.settings.error_min_requests and ratio > limit
        track.error_figures = None
        if holds:
            track.error_figures = {
                "ratio": round(ratio, 3),
                "threshold": limit,
                "requests": requests,
                "window": round(now - then, 1),
            }

    def _error_ratio(self, track: SpiderWatch, now: float) -> list[tuple[EventType, Figures]]:
        holds = track.error_figures is not None
        if not track.errors.step(holds, now, self.settings.grace, self.settings.rearm):
            return []
        return [(EventType.SPIDER_ERROR_RATIO, {**track.figures, **(track.error_figures or {})})]

    def _stalled(self, track: SpiderWatch, now: float) -> list[tuple[EventType, Figures]]:
        after, figures = self.settings.stall_after, track.figures
        running = figures.get("state") == "running" and bool(figures.get("queue"))
        quiet = now - track.progress[1] if track.progress is not None else 0.0
        holds = after > 0 and running and quiet >= after
        if not track.stalled.step(holds, now, 0.0, self.settings.rearm):
            return []
        return [(EventType.SPIDER_STALLED, {**figures, "quiet_for": round(quiet, 1),
                                            "stall_after": after})]  # fmt: skip

    # -- engines, from their znode data -------------------------------------------

    def engine(self, engine_id: str, data: Mapping[str, Any], now: float) -> list[Trip]:
        """One read of the engine's znode data: its loop and its disks."""
        watch = self._watch(engine_id)
        watch.data = data
        return self._loop(watch, engine_id, data, now) + self._disks(watch, engine_id, data, now)

    # -- the clock ----------------------------------------------------------------

    def tick(self, now: float, answers_within: float) -> list[Trip]:
        """Every lasting condition stepped at ``now`` with the latest observations.

        The spider rules only for an engine whose latest status answer is at most
        ``answers_within`` seconds old: a spider is not "stalled" because its engine
        stopped answering (its loop, or its departure, is reported instead).
        """
        trips: list[Trip] = []
        for engine_id, watch in self._engines.items():
            if watch.data is not None:
                trips += self._loop(watch, engine_id, watch.data, now)
                trips += self._disks(watch, engine_id, watch.data, now)
            if watch.answered is None or now - watch.answered > answers_within:
                continue
            for spider, track in watch.spiders.items():
                trips += [Trip(kind, engine_id, spider, figures)
                          for kind, figures in self._lasting(track, now)]  # fmt: skip
        return trips

    def _loop(
        self, watch: EngineWatch, engine_id: str, data: Mapping[str, Any], now: float
    ) -> list[Trip]:
        lag = number(data.get("loop_lag"))
        lag = None if lag is None else round(lag, 3)
        was = watch.stalled.fired
        # rearm 0: a recovery is reported as soon as the znode says so, after a stall
        watch.stalled.step(data.get("stalled") is True, now, self.settings.loop_grace, 0.0)
        if watch.stalled.fired and not was:
            return [Trip(EventType.ENGINE_STALLED, engine_id, None, {"loop_lag": lag})]
        if was and not watch.stalled.fired:
            return [Trip(EventType.ENGINE_RECOVERED, engine_id, None, {"loop_lag": lag})]
        return []

    def _disks(
        self, watch: EngineWatch, engine_id: str, data: Mapping[str, Any], now: float
    ) -> list[Trip]:
        below = self.settings.disk_free_below
        facts = data.get("facts")
        disks = facts.get("disk_free") if isinstance(facts, dict) else None
        if below <= 0 or not isinstance(disks, dict):
            return []
        trips = []
        for disk, free in list(disks.items())[:MAX_DISKS]:
            disk, free = name(disk), count(free)
            if disk is None or free is None:
                continue
            latch = watch.disks.setdefault(disk, Latch())
            if latch.step(free < below, now, self.settings.grace, self.settings.rearm):
                figures = {"disk": disk, "free": free, "threshold": below}
                trips.append(Trip(EventType.DISK_FREE_BELOW, engine_id, None, figures))
        return trips


def spider_changes(
    previous: Mapping[str, Any] | None, data: Mapping[str, Any]
) -> list[tuple[EventType, str, str | None, str]]:
    """What changed in a znode's spider list: ``(event, spider, old state, new state)``."""
    before = _states(previous or {})
    out = []
    for spider, state in _states(data).items():
        old = before.get(spider)
        if old == state:
            continue
        kind = CHANGES.get((old, state)) or _ENTERED.get(state)
        if kind is not None:
            out.append((kind, spider, old, state))
    return out


def _states(data: Mapping[str, Any]) -> dict[str, str]:
    spiders = data.get("spiders")
    if not isinstance(spiders, list):
        return {}
    states = {}
    for entry in spiders[:MAX_SPIDERS]:
        if isinstance(entry, dict):
            spider, state = name(entry.get("name")), name(entry.get("state"))
            if spider is not None and state is not None:
                states[spider] = state
    return states
