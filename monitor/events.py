"""The monitor's one catalogue of events, typed.

Every change the watcher sees, and every change in the monitor's own link to
ZooKeeper, becomes one :class:`Event`. Hooks, the HTTP routes, the metrics and
the logs all consume the same objects, so what an e-mail says and what the
dashboard shows can never disagree.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


class EventType(StrEnum):
    """What happened. The values are the public names (DESIGN.md)."""

    ENGINE_JOINED = "engine_joined"
    ENGINE_LEFT = "engine_left"  # deleted its node after writing state "leaving"
    ENGINE_LOST = "engine_lost"  # vanished without leaving (crash, expiry)
    ENGINE_RESTARTED = "engine_restarted"  # new node (czxid) under the same name
    ENGINE_UPDATED = "engine_updated"  # same node, new data
    ENGINE_FLAPPED = "engine_flapped"  # lost, then back within the grace period
    CLUSTER_EMPTY = "cluster_empty"
    ZK_DISCONNECTED = "zk_disconnected"
    ZK_RECONNECTED = "zk_reconnected"


#: Events about one engine (they carry ``engine_id``).
ENGINE_EVENTS = frozenset(
    {
        EventType.ENGINE_JOINED,
        EventType.ENGINE_LEFT,
        EventType.ENGINE_LOST,
        EventType.ENGINE_RESTARTED,
        EventType.ENGINE_UPDATED,
        EventType.ENGINE_FLAPPED,
    }
)

_sequence = itertools.count(1)


@dataclass(frozen=True, kw_only=True)
class Event:
    """One thing that happened, with the engine's last known data.

    ``engine`` is the engine's znode data as last read (plus ``czxid`` and
    ``session``); ``previous`` is the data before a restart or an update.
    ``detail`` holds event-specific facts (e.g. ``unobserved`` changes).
    """

    type: EventType
    engine_id: str | None = None
    engine: dict[str, Any] = field(default_factory=dict)
    previous: dict[str, Any] | None = None
    detail: dict[str, Any] = field(default_factory=dict)
    time: float = field(default_factory=time.time)
    seq: int = field(default_factory=lambda: next(_sequence))

    def to_json(self) -> dict[str, Any]:
        """The JSON shape used by the HTTP routes, webhooks and commands."""
        return {
            "seq": self.seq,
            "type": self.type.value,
            "engine_id": self.engine_id,
            "time": self.time,
            "time_iso": iso(self.time),
            "engine": self.engine,
            "previous": self.previous,
            "detail": self.detail,
        }


def iso(timestamp: float) -> str:
    """UTC ISO-8601 with milliseconds, the one time format users see."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(timestamp)) + (
        f".{int(timestamp * 1000) % 1000:03d}Z"
    )
