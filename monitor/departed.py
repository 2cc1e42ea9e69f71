"""Engines that left or were lost, kept for the dashboard: the dead stay listed.

An engine gone from ZooKeeper is gone from the watcher's view at once; users still
want to see it (greyed) with its last figures, when it went, whether it left or
crashed and whether the alert went out, for ``http.offline_retention`` seconds.
Bounded: at most :data:`MAX_DEPARTED` engines, the oldest forgotten first.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from monitor.events import Event, EventType, iso

MAX_DEPARTED = 200


class Departed:
    """The last known state of engines no longer in the view, newest last."""

    def __init__(self, retention: float) -> None:
        self.retention = retention
        self._gone: dict[str, dict[str, Any]] = {}

    def add(
        self, event: Event, spiders: list[dict[str, Any]], read_at: float | None = None
    ) -> None:
        """``event`` (engine_left or engine_lost) took its engine; ``spiders``: its last
        read, at ``read_at`` (what it did after that read is not in them)."""
        if event.engine_id is None or self.retention <= 0:
            return
        self._gone.pop(event.engine_id, None)
        self._gone[event.engine_id] = {
            "engine": event.engine,
            "how": "left" if event.type is EventType.ENGINE_LEFT else "lost",
            "at": event.time,
            "seq": event.seq,
            "key": event.key,  # the delivering monitor's event has its own seq, the same key
            "spiders": spiders,
            "read_at": read_at,
        }
        while len(self._gone) > MAX_DEPARTED:
            del self._gone[next(iter(self._gone))]

    def back(self, engine_id: str) -> None:
        """The engine is in the view again."""
        self._gone.pop(engine_id, None)

    def _prune(self, now: float) -> None:
        for engine_id in [e for e, d in self._gone.items() if now - d["at"] > self.retention]:
            del self._gone[engine_id]

    def entries(
        self, now: float, alert: Callable[[str, dict[str, Any]], Any]
    ) -> list[dict[str, Any]]:
        """What ``GET /netdiscovery/monitor`` lists under ``offline``; ``alert(id, gone)``
        says what became of the alert about it."""
        self._prune(now)
        return [
            {
                **gone["engine"],
                "id": engine_id,
                "offline": True,
                "how": gone["how"],
                "gone_at": gone["at"],
                "gone_at_iso": iso(gone["at"]),
                "spiders_read": gone["spiders"],
                "spiders_read_at": gone.get("read_at"),
                "alert": alert(engine_id, gone),
            }
            for engine_id, gone in self._gone.items()
        ]

    def summaries(self, now: float) -> list[dict[str, Any]]:
        """The last spider summaries of every engine kept (for the totals' pages)."""
        self._prune(now)
        return [s for gone in self._gone.values() for s in gone["spiders"]]
