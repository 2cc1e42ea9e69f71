"""An embedded engine leaves nothing behind however its application ends.

Each way of ending (``embedded_app``: cancel, SIGTERM, SIGINT, ``async with``, an
exception in the app) runs in its own process against the test's real ZooKeeper and
a real monitor: the monitor says ``engine_left`` (a graceful leave with its
tombstone), never ``engine_lost``; the node is gone; and the process reports no
netdisco or kazoo task, no thread and no socket left.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys

import pytest

from netdisco.testing import eventually
from tests.monitor.conftest import REPO, monitor_config

MODES = ("cancel", "sigterm", "sigint", "async_with", "exception")


async def _end(proc: asyncio.subprocess.Process, mode: str) -> None:
    assert proc.stdin is not None
    if mode == "sigterm":
        proc.send_signal(signal.SIGTERM)
    elif mode == "sigint":
        proc.send_signal(signal.SIGINT)
    else:
        proc.stdin.write(b"end\n")
        await proc.stdin.drain()


async def _ready(stdout: asyncio.StreamReader) -> None:
    while (line := await stdout.readline()) != b"READY\n":
        assert line, "the application ended before it was registered"


@pytest.mark.parametrize("mode", MODES)
async def test_every_way_of_ending_leaves_nothing(zk_hosts, start_monitor, mode):
    monitor, rec = await start_monitor(monitor_config(zk_hosts))
    engine_id = f"embedded-{mode.replace('_', '-')}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("NETDISCO_")}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tests.monitor.embedded_app", mode, zk_hosts, engine_id,
        cwd=REPO, env=env, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        await asyncio.wait_for(_ready(proc.stdout), 60)
        await eventually(lambda: rec.of("engine_joined", engine_id), "joined", timeout=30)
        await _end(proc, mode)
        out, _ = await asyncio.wait_for(proc.communicate(), 60)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    report = json.loads([x for x in out.decode().splitlines() if x.startswith("{")][-1])
    assert report["engine"] == "stopped", report
    assert report["tasks"] == [], report
    assert report["threads"] == [], report
    assert report["sockets"] == 0, report
    await eventually(lambda: rec.of("engine_left", engine_id), "engine_left", timeout=30)
    assert rec.types(engine_id) == ["engine_joined", "engine_left"]
    assert engine_id not in {m.name for m in monitor.watcher.members()}
