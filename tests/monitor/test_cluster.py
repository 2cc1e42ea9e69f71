"""The cluster at large: 200 engines churning, and a ZooKeeper server restart."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
from collections import Counter
from functools import partial
from typing import Any

import pytest
from kazoo.client import KazooClient

from monitor.events import EventType
from netdisco.testing import ZooKeeperServer, eventually
from tests.monitor.conftest import REPO, monitor_config
from tests.monitor.fake_engines import FakeEngine


async def _spawn_churn(
    hosts: str, prefix: str, engines: int, ops: int, *extra: str
) -> asyncio.subprocess.Process:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tests.monitor.fake_engines", "churn", hosts, "/netdiscovery",
        prefix, "--engines", str(engines), "--ops", str(ops), *extra,
        cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert proc.stdout is not None
    assert (await proc.stdout.readline()).strip() == b"ready"
    return proc


def _root_stat(hosts: str) -> Any:
    client = KazooClient(hosts=hosts)
    client.start(timeout=15)
    try:
        return client.exists("/netdiscovery")
    finally:
        client.stop()
        client.close()


async def _tell(proc: asyncio.subprocess.Process, line: bytes) -> None:
    assert proc.stdin is not None
    proc.stdin.write(line)
    await proc.stdin.drain()


@pytest.mark.slow
@pytest.mark.parametrize("mode", [(), ("--graceful-only",)], ids=["mixed", "graceful-only"])
async def test_200_engines_churning_every_change_accounted_for(zk_hosts, start_monitor, mode):
    monitor, rec = await start_monitor(monitor_config(zk_hosts, zookeeper={"session_timeout": 10}))
    procs = await asyncio.gather(
        *(_spawn_churn(zk_hosts, f"w{i}-", 50, 16, *mode) for i in range(4))
    )
    try:
        for proc in procs:
            await _tell(proc, b"go\n")
        results = []
        for proc in procs:
            assert proc.stdout is not None
            results.append(json.loads(await asyncio.wait_for(proc.stdout.readline(), 45)))
        truth = {name: czxid for r in results for name, czxid in r["held"].items()}
        cversion = (await asyncio.to_thread(_root_stat, zk_hosts)).cversion

        def converged() -> bool:
            # the members, and the count of changes: a join and leave nobody saw
            # leaves the members as they were but must still be counted
            view = monitor.watcher.view
            members = {m.name: m.czxid for m in monitor.watcher.members()}
            return members == truth and view is not None and view.parent.cversion == cversion

        await eventually(converged, timeout=20, what="the monitor's view equals the truth")
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
        if mode:  # every delete was a leave with its tombstone: none may read as a loss
            # how many leaves the monitor sees one by one (rather than as a join and a
            # leave it never observed) depends on the machine's load (5 of 1,000 beside two
            # burners); some departure must be seen, as a leave or as a restart after a
            # leave, or the next lines would hold vacuously
            restarts = [e for e in rec.events if e.type is EventType.ENGINE_RESTARTED]
            assert counts[EventType.ENGINE_LEFT] + len(restarts) > 0, counts
            assert counts[EventType.ENGINE_LOST] == 0, counts
            assert all(e.detail.get("previous_left") for e in restarts), restarts[:3]
    finally:
        for proc in procs:
            await _bye(proc)


async def _bye(proc: asyncio.subprocess.Process, grace: float = 30.0) -> None:
    """Ask a churner to leave; kill it if it has died meanwhile or does not go in time."""
    with contextlib.suppress(ConnectionError):  # it is gone already
        await _tell(proc, b"bye\n")
    try:
        await asyncio.wait_for(proc.wait(), grace)
    except TimeoutError:
        proc.kill()
        await proc.wait()


async def test_zookeeper_restart_gives_no_false_events(start_monitor, tmp_path):
    # sessions of 30 s (tickTime 2 s allows them): a restart of a JVM on a loaded machine
    # must not outlast them, or the engines' expiry is real, not a false event
    # kazoo waits up to the session timeout divided by the number of hosts for a connect's
    # answer, and a connect that reaches the port while the JVM still starts may wait that
    # long for nothing: the one server is named three times, so each try waits 10 s at most
    server = ZooKeeperServer(data_dir=tmp_path, tick_ms=2000)
    await asyncio.to_thread(server.start)
    hosts = ",".join([server.hosts] * 3)
    made: list[FakeEngine] = []
    try:
        config = monitor_config(hosts, zookeeper={"session_timeout": 30})
        monitor, rec = await start_monitor(config)
        for name in ("a", "b"):
            engine = await asyncio.to_thread(
                partial(FakeEngine, hosts, "/netdiscovery", name, 30, retry_forever=True)
            )
            made.append(engine)
            await asyncio.to_thread(engine.join)
        await eventually(lambda: len(monitor.watcher.members()) == 2)
        before = {m.name: m.czxid for m in monitor.watcher.members()}
        mark = len(rec.events)
        await asyncio.to_thread(server.restart)
        await eventually(lambda: rec.of("zk_reconnected"), timeout=60, what="monitor reconnected")
        # Fresh again: the monitor has made the full listing that follows its reconnection
        # and compared it with its view (it sets ``fresh`` only once that is done, after
        # reporting what it found), so any false event would be out by now. Nothing else
        # changes meanwhile to wake another look: no fixed room for one to show up.
        await eventually(lambda: monitor.health()[0], what="fresh view after the restart")
        assert [e.type.value for e in rec.events[mark:]] == ["zk_disconnected", "zk_reconnected"]
        assert {m.name: m.czxid for m in monitor.watcher.members()} == before
    finally:
        for engine in made:
            await asyncio.to_thread(engine.close)
        await asyncio.to_thread(server.stop)
