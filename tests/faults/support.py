"""Engines and monitors for the fault scenarios: real registrations, the real monitor."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from monitor.daemon import Monitor
from monitor.events import Event, EventType
from netdisco.cluster.registry import Registration, ZooKeeperSettings
from tests.faults.table import ROWS, Row
from tests.monitor.conftest import Recorder, monitor_config
from tests.netdisco.registry_support import Describe

ENGINE_EVENTS = {
    EventType.ENGINE_JOINED,
    EventType.ENGINE_LEFT,
    EventType.ENGINE_LOST,
    EventType.ENGINE_RESTARTED,
    EventType.ENGINE_UPDATED,
    EventType.CLUSTER_EMPTY,
}


def registration(hosts: str, engine_id: str, session_timeout: float = 10.0) -> Registration:
    """An engine's registration, as ``netdisco engine`` runs it (not started)."""
    settings = ZooKeeperSettings(hosts=hosts, session_timeout=session_timeout, audit_interval=1.0)
    return Registration(settings, engine_id, Describe(engine_id))


@asynccontextmanager
async def monitoring(
    hosts: str, state_file: Path | None = None, **zookeeper: Any
) -> AsyncIterator[tuple[Monitor, Recorder]]:
    """The real monitor, started and fresh; closed on exit."""
    alerts: dict[str, Any] = {"grace": 5.0}
    if state_file is not None:
        alerts["state_file"] = str(state_file)
    config = monitor_config(hosts, zookeeper={"session_timeout": 10.0, **zookeeper}, alerts=alerts)
    monitor = Monitor(config)
    rec = Recorder(monitor)
    await monitor.start()
    try:
        await asyncio.wait_for(monitor.watcher.fresh.wait(), 60)
        yield monitor, rec
    finally:
        await monitor.close()


def engine_events(events: list[Event]) -> Counter[EventType]:
    return Counter(e.type for e in events if e.type in ENGINE_EVENTS)


def report(scenario: str, runs: int, expected: int, false: int, lost: int, started: float) -> None:
    ROWS.append(Row(scenario, runs, expected, false, lost, time.monotonic() - started))
