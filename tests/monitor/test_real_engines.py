"""Real ``netdisco engine`` processes against the real monitor: leave, crash, restart."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from netdisco.testing import eventually, free_port
from tests.monitor.conftest import monitor_config


@pytest.fixture
async def spawn_engine(
    tmp_path: Path, zk_hosts: str
) -> AsyncIterator[Callable[[str], Awaitable[asyncio.subprocess.Process]]]:
    """``netdisco engine --config`` with a [zookeeper] table; killed by pid at teardown."""
    procs: list[asyncio.subprocess.Process] = []

    async def spawn(engine_id: str) -> asyncio.subprocess.Process:
        config = tmp_path / f"{engine_id}.toml"
        config.write_text(
            f'[engine]\nid = "{engine_id}"\nport = {free_port()}\n'
            f'[zookeeper]\nhosts = "{zk_hosts}"\nsession_timeout = 2.0\n'
        )
        env = {k: v for k, v in os.environ.items() if not k.startswith("NETDISCO_")}
        log = open(tmp_path / f"{engine_id}.log", "wb")  # noqa: SIM115, ASYNC230 - the child owns it
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "netdisco.cli", "--log-json", "engine", "--config", str(config),
            env=env, stdout=log, stderr=log,
        )  # fmt: skip
        log.close()
        procs.append(proc)
        return proc

    yield spawn
    for proc in procs:
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()


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
