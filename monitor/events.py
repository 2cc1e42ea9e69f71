"""The monitor's one catalogue of events, typed.

Every change the watcher sees, and every change in the monitor's own link to
ZooKeeper, becomes one :class:`Event`. Hooks, the HTTP routes, the metrics and
the logs all consume the same objects, so what an e-mail says and what the
dashboard shows can never disagree.
"""

from __future__ import annotations

import hashlib
import itertools
import time
from dataclasses import dataclass, field
from typing import Any

from netdisco.cluster.contract import EventType

__all__ = ["Event", "EventType", "iso", "same"]

_sequence = itertools.count(1)


@dataclass(frozen=True, kw_only=True)
class Event:
    """One thing that happened, with the engine's last known data.

    ``engine`` is the engine's znode data as last read (plus ``czxid`` and
    ``session``); ``previous`` is the data before a restart or an update.
    ``detail`` holds event-specific facts (e.g. ``unobserved`` changes).
    ``identity``: what every monitor computes alike for the same happening (the engine,
    its node's czxid, the kind; a rule's episode; a job's attempt), so that the outbox
    (:mod:`monitor.outbox`) keeps one alert for it however many monitors saw it; None
    for the monitor's own events (its link to ZooKeeper), which it alerts about itself.
    """

    type: EventType
    engine_id: str | None = None
    engine: dict[str, Any] = field(default_factory=dict)
    previous: dict[str, Any] | None = None
    detail: dict[str, Any] = field(default_factory=dict)
    time: float = field(default_factory=time.time)
    seq: int = field(default_factory=lambda: next(_sequence))
    identity: tuple[str, ...] | None = None

    @property
    def key(self) -> str | None:
        """The identity as a short stable name (a znode name, a ``Message-ID``)."""
        if self.identity is None:
            return None
        return hashlib.sha256("\x1f".join(self.identity).encode()).hexdigest()[:32]

    def to_json(self) -> dict[str, Any]:
        """The JSON shape used by the HTTP routes, webhooks and commands."""
        return {
            "seq": self.seq,
            "id": self.key,
            "type": self.type.value,
            "engine_id": self.engine_id,
            "time": self.time,
            "time_iso": iso(self.time),
            "engine": self.engine,
            "previous": self.previous,
            "detail": self.detail,
        }


def same(*parts: object) -> tuple[str, ...]:
    """An identity from its parts, as text (``None`` reads ``-``)."""
    return tuple("-" if part is None else str(part) for part in parts)


def iso(timestamp: float) -> str:
    """UTC ISO-8601 with milliseconds, the one time format users see."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(timestamp)) + (
        f".{int(timestamp * 1000) % 1000:03d}Z"
    )
