"""The cluster at large: 200 engines churning, and a ZooKeeper server restart."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections import Counter

from monitor.events import EventType
from netdisco.testing import ZooKeeperServer
from tests.monitor.conftest import REPO, monitor_config, until
from tests.monitor.fake_engines import FakeEngine


async def _spawn_churn(
    hosts: str, prefix: str, engines: int, ops: int
) -> asyncio.subprocess.Process:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tests.monitor.fake_engines", "churn", hosts, "/netdiscovery",
        prefix, "--engines", str(engines), "--ops", str(ops),
        cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert proc.stdout is not None
    assert (await proc.stdout.readline()).strip() == b"ready"
    return proc


async def _tell(proc: asyncio.subprocess.Process, line: bytes) -> None:
    assert proc.stdin is not None
    proc.stdin.write(line)
    await proc.stdin.drain()


async def test_200_engines_churning_every_change_accounted_for(zk_hosts, start_monitor):
    monitor, rec = await start_monitor(monitor_config(zk_hosts, zookeeper={"session_timeout": 10}))
    procs = await asyncio.gather(
        *(_spawn_churn(zk_hosts, f"w{i}-", engines=50, ops=16) for i in range(4))
    )
    try:
        for proc in procs:
            await _tell(proc, b"go\n")
        results = []
        for proc in procs:
            assert proc.stdout is not None
            results.append(json.loads(await asyncio.wait_for(proc.stdout.readline(), 45)))
        truth = {name: czxid for r in results for name, czxid in r["held"].items()}

        def converged() -> bool:
            return {m.name: m.czxid for m in monitor.watcher.members()} == truth

        await until(converged, timeout=20, what="the monitor's view equals the truth")
        true_changes = sum(r["creates"] + r["deletes"] for r in results)
        counts = Counter(e.type for e in rec.events)
        seen = (
            counts[EventType.ENGINE_JOINED]
            + counts[EventType.ENGINE_LEFT]
            + counts[EventType.ENGINE_LOST]
            + 2 * counts[EventType.ENGINE_RESTARTED]
        )
        assert true_changes > 1000
        assert seen + monitor.watcher.unobserved_total == true_changes, (counts, true_changes)
    finally:
        for proc in procs:
            await _tell(proc, b"bye\n")
            await proc.wait()


async def test_zookeeper_restart_gives_no_false_events(start_monitor, tmp_path):
    server = ZooKeeperServer(data_dir=tmp_path)
    await asyncio.to_thread(server.start)
    made: list[FakeEngine] = []
    try:
        config = monitor_config(server.hosts, zookeeper={"session_timeout": 10})
        monitor, rec = await start_monitor(config)
        for name in ("a", "b"):
            engine = await asyncio.to_thread(FakeEngine, server.hosts, "/netdiscovery", name, 10)
            made.append(engine)
            await asyncio.to_thread(engine.join)
        await until(lambda: len(monitor.watcher.members()) == 2)
        before = {m.name: m.czxid for m in monitor.watcher.members()}
        mark = len(rec.events)
        await asyncio.to_thread(server.restart)
        await until(lambda: rec.of("zk_reconnected"), timeout=30, what="monitor reconnected")
        await until(lambda: monitor.health()[0], what="fresh view after the restart")
        await asyncio.sleep(1.0)  # room for any false event to show up
        assert [e.type.value for e in rec.events[mark:]] == ["zk_disconnected", "zk_reconnected"]
        assert {m.name: m.czxid for m in monitor.watcher.members()} == before
    finally:
        for engine in made:
            await asyncio.to_thread(engine.close)
        await asyncio.to_thread(server.stop)
