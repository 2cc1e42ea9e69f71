"""An engine or a monitor broken on purpose, to show that ``make partitions`` catches it.

``python -m tests.cluster.broken unfenced ARGS...``: ``netdisco ARGS`` with the fence
switched off: an engine cut from ZooKeeper goes on starting the requests it leased after
its session may have ended and its leases been handed to others (late starts).

``python -m tests.cluster.broken inventive ARGS...``: ``netdisco-monitor ARGS`` that
reports one engine it has seen lost without cause, 5 s after it first saw it join
(a false event).

``NDC_BREAK=unfenced`` or ``NDC_BREAK=inventive`` makes the partitions harness start
its engines or its monitor this way; the run must then fail.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

INVENT_AFTER = 5.0


def unfenced(argv: list[str]) -> int:
    from netdisco import _fence, cli

    def never(self: _fence.Fence, *args: Any) -> None:
        """The fence stays open whatever ZooKeeper says."""

    _fence.Fence.close = never  # type: ignore[method-assign,assignment]
    _fence.Fence.lose = never  # type: ignore[method-assign]
    return cli.main(argv)


def inventive(argv: list[str]) -> int:
    from monitor import cli, daemon
    from monitor.events import Event, EventType

    record = daemon.Monitor.record
    invented: set[str] = set()

    def invent(self: daemon.Monitor, event: Event) -> None:
        record(self, event)
        engine = event.engine_id
        if event.type is EventType.ENGINE_JOINED and engine and engine not in invented:
            invented.add(engine)
            lost = Event(type=EventType.ENGINE_LOST, engine_id=engine, engine=dict(event.engine))
            asyncio.get_running_loop().call_later(INVENT_AFTER, record, self, lost)

    daemon.Monitor.record = invent  # type: ignore[method-assign]
    return cli.main(argv)


if __name__ == "__main__":
    how, *rest = sys.argv[1:]
    sys.exit({"unfenced": unfenced, "inventive": inventive}[how](rest))
