"""Real ``netdisco engine`` processes against the real monitor: leave, crash, restart."""

from __future__ import annotations

import signal

from netdisco.testing import eventually
from tests.monitor.conftest import monitor_config


async def test_real_engines_leave_crash_and_restart(zk_hosts, start_monitor, spawn_engine):
    monitor, rec = await start_monitor(monitor_config(zk_hosts))
    procs = {name: await spawn_engine(name) for name in ("calm", "doomed", "again")}
    await eventually(
        lambda: len(monitor.watcher.members()) == 3, "three real engines registered", timeout=30
    )
    procs["calm"].send_signal(signal.SIGTERM)
    procs["doomed"].send_signal(signal.SIGKILL)
    assert await procs["calm"].wait() == 0
    await eventually(lambda: rec.of("engine_left", "calm") and rec.of("engine_lost", "doomed"))
    procs["again"].send_signal(signal.SIGTERM)
    assert await procs["again"].wait() == 0
    await spawn_engine("again")  # the same id, a new process: left, then joined
    await eventually(
        lambda: rec.of("engine_restarted", "again") or len(rec.types("again")) >= 3,
        "again left and came back",
        timeout=30,
    )
    assert rec.types("calm") == ["engine_joined", "engine_left"]
    assert rec.types("doomed") == ["engine_joined", "engine_lost"]
    back = rec.types("again")
    assert back in (
        ["engine_joined", "engine_left", "engine_joined"],
        ["engine_joined", "engine_restarted"],
    ), back
    restarts = rec.of("engine_restarted", "again")
    assert all(e.detail["previous_left"] for e in restarts)
