"""The last minutes of each engine's spiders, in memory, for the dashboard's charts.

Fed by the status poller with each engine's ``GET /netdiscovery/spiders`` answer.
Everything is bounded: ``points`` samples per spider, ``max_spiders`` spiders per
engine, and only engines still in the view. A spider that is not running shows
no rate (a finished one would otherwise keep its last minute's pages/s for a
minute): its summary says ``None`` and its chart gets a gap.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterable, Mapping
from typing import Any

#: what the dashboard shows of a spider's status object
SPIDER_KEYS = ("name", "state", "succeeded", "failed", "items", "queue_size", "in_flight",
               "next_run", "last_error")  # fmt: skip
#: states in which a spider fetches nothing, so its last minute's pages/s would mislead
QUIET = frozenset({"idle", "paused", "stopped", "finished", "failed"})

Sample = tuple[float, float | None]


class SpiderTrack:
    """One spider's latest summary and its recent pages/s."""

    __slots__ = ("series", "summary")

    def __init__(self, points: int) -> None:
        self.series: deque[Sample] = deque(maxlen=points)
        self.summary: dict[str, Any] = {}

    def update(self, status: dict[str, Any], at: float) -> None:
        self.summary = {key: status.get(key) for key in SPIDER_KEYS}
        if self.summary["state"] == "finished":
            self.summary["queue_size"] = 0  # its last count is from before it ended
        rate = status.get("pages_per_second")
        rated = status.get("state") not in QUIET and isinstance(rate, int | float)
        self.summary["pages_per_second"] = float(rate) if rated and rate is not None else None
        self.series.append((round(at, 3), self.summary["pages_per_second"]))

    def to_json(self) -> dict[str, Any]:
        return {**self.summary, "series": [list(sample) for sample in self.series]}


class History:
    """Per engine, per spider: the latest summary and a bounded pages/s series."""

    def __init__(self, points: int = 120, max_spiders: int = 200) -> None:
        self.points = points
        self.max_spiders = max_spiders
        self._engines: dict[str, dict[str, SpiderTrack]] = {}
        self._read_at: dict[str, float] = {}

    def __len__(self) -> int:
        return len(self._engines)

    def record(self, engine_id: str, body: Any, at: float | None = None) -> None:
        """Take one poll's answer (a list of spider status objects; anything else is ignored)."""
        if not isinstance(body, list):
            return
        when = time.time() if at is None else at
        old = self._engines.get(engine_id, {})
        tracks: dict[str, SpiderTrack] = {}
        for status in body:
            name = status.get("name") if isinstance(status, dict) else None
            if not isinstance(name, str) or name in tracks or len(tracks) >= self.max_spiders:
                continue
            track = old.get(name) or SpiderTrack(self.points)
            track.update(status, when)
            tracks[name] = track
        self._engines[engine_id] = tracks
        self._read_at[engine_id] = when

    def keep_only(self, present: Iterable[str]) -> None:
        """Forget engines that left the view."""
        keep = set(present)
        for engine_id in [e for e in self._engines if e not in keep]:
            del self._engines[engine_id]
            del self._read_at[engine_id]

    def engine(self, engine_id: str) -> list[dict[str, Any]]:
        """The engine's spiders as last read (kept for it once it left the view)."""
        return [t.to_json() for t in self._engines.get(engine_id, {}).values()]

    def engine_rate(self, engine_id: str) -> float | None:
        """Pages/s of the engine's running spiders (None before its first read)."""
        if engine_id not in self._engines:
            return None
        return round(
            _sum(t.summary["pages_per_second"] for t in self._engines[engine_id].values()), 2
        )

    def to_json(
        self, crawls: Mapping[tuple[str, str], str] | None = None, gone: Iterable[Any] = ()
    ) -> dict[str, Any]:
        """What ``GET /netdiscovery/monitor/spiders`` answers: engines and cluster totals.

        ``crawls`` names the shared frontier of ``(engine, spider)``; ``gone`` holds the
        last spider summaries of engines that left, whose pages the totals keep.
        """
        engines = {
            engine_id: {"read_at": self._read_at[engine_id],
                        "spiders": [t.to_json() for t in tracks.values()]}
            for engine_id, tracks in self._engines.items()
        }  # fmt: skip
        totals = self.totals(crawls or {}, list(gone))
        return {"points": self.points, "engines": engines, "totals": totals}

    def totals(
        self, crawls: Mapping[tuple[str, str], str], gone: list[dict[str, Any]]
    ) -> dict[str, Any]:
        """Cluster totals: counts by state, pages and failures (with those of engines that
        left), the queue (a shared frontier once), the rate."""
        pairs = [(e, t.summary) for e, tracks in self._engines.items() for t in tracks.values()]
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
