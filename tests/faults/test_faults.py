"""The fault scenarios of the exact-membership guarantee, against real ZooKeeper.

Each test asserts its outcome and adds one row to the table ``make faults``
prints: a graceful leave is never reported as a loss, whatever the load, the
server's state or the monitor's.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
import time
from collections import Counter
from functools import partial
from pathlib import Path

import pytest
from kazoo.exceptions import KazooException

from monitor.daemon import Monitor
from monitor.events import Event, EventType
from netdisco.cluster.registry import Registration
from netdisco.testing import ZooKeeperServer, eventually
from tests.faults.ensemble import Ensemble
from tests.faults.proxy import DelayProxy
from tests.faults.support import ENGINE_EVENTS, engine_events, monitoring, registration, report
from tests.monitor.conftest import REPO, Recorder
from tests.monitor.fake_engines import FakeEngine
from tests.monitor.test_cluster import _spawn_churn, _tell
from tests.netdisco.registry_support import hijack_session

pytestmark = pytest.mark.timeout(900)

PROC = REPO / "tests" / "netdisco" / "registry_proc.py"
Departures = Counter[tuple[EventType, str | None]]


def _new_leader(ensemble: Ensemble, old: int) -> bool:
    return ensemble.leader() not in (None, old)


def _engine_events_since(rec: Recorder, mark: int, count: int) -> bool:
    return sum(engine_events(rec.events[mark:]).values()) >= count


def _moved_on(monitor: Monitor, engine: Registration, czxid: int) -> bool:
    """The engine is registered again and the monitor shows its new node."""
    return engine.healthy and [m.czxid for m in monitor.watcher.members()] not in ([], [czxid])


async def _expire_once(
    server: ZooKeeperServer, monitor: Monitor, engine: Registration, run: int
) -> None:
    """Force the engine's session out (as a long pause would) until it is re-registered.

    The engine reconnects within milliseconds and may win its session back from
    the thief before the close: then the thief tries again.
    """
    czxid = monitor.watcher.members()[0].czxid
    for _ in range(10):
        client = engine._client
        assert client is not None
        assert client.client_id is not None
        try:
            await hijack_session(server.hosts, client.client_id)  # no chroot: one request
        except KazooException:  # the thief timed out (a loaded machine): try again
            continue
        try:
            await eventually(partial(_moved_on, monitor, engine, czxid), timeout=10)
            return
        except AssertionError:
            continue
    raise AssertionError(f"run {run}: {engine.status()} {monitor.watcher.members()}")


async def _started(*registrations: Registration) -> None:
    for item in registrations:
        await item.start()
    await eventually(lambda: all(r.healthy for r in registrations), "engines registered")


async def _spawn(hosts: str, name: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable, str(PROC), hosts, name, "2.0", cwd=REPO
    )


async def _while_monitor_down(zk_hosts: str, state: Path, names: list[str]) -> Departures:
    procs = [await _spawn(zk_hosts, name) for name in names]
    try:
        async with monitoring(zk_hosts, state_file=state) as (monitor, _):
            await eventually(lambda: len(monitor.watcher.members()) == len(names))
        for proc in procs[:-1]:
            proc.send_signal(signal.SIGTERM)
        procs[-1].kill()
        for proc in procs:
            await proc.wait()
        await asyncio.sleep(4.0)  # the killed engine's session (2 s) expires meanwhile
        async with monitoring(zk_hosts, state_file=state) as (_, rec):
            await eventually(lambda: len(rec.events) >= len(names), "the departures")
            await asyncio.sleep(0.5)
            return Counter(
                (e.type, e.engine_id) for e in rec.events if e.type is not EventType.CLUSTER_EMPTY
            )
    finally:
        for proc in procs:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()


async def test_monitor_down_while_three_leave_and_one_is_killed(zk_hosts: str, tmp_path: Path):
    started, runs, false, lost = time.monotonic(), 3, 0, 0
    for run in range(runs):
        names = [f"m{run}-{i}" for i in range(4)]
        got = await _while_monitor_down(zk_hosts, tmp_path / f"state-{run}.json", names)
        want: Departures = Counter({(EventType.ENGINE_LEFT, n): 1 for n in names[:3]})
        want[(EventType.ENGINE_LOST, names[3])] = 1
        false += sum((got - want).values())
        lost += sum((want - got).values())
    report("monitor down: 3 leave + 1 SIGKILL", runs, 4 * runs, false, lost, started)
    assert (false, lost) == (0, 0)


async def test_zookeeper_restarts_give_no_false_events(tmp_path: Path):
    started, runs = time.monotonic(), 10
    server = ZooKeeperServer(data_dir=tmp_path / "zk", tick_ms=1000)  # sessions up to 20 s
    await asyncio.to_thread(server.start)
    engines = [registration(server.hosts, f"r{i}", session_timeout=20.0) for i in range(5)]
    try:
        await _started(*engines)
        async with monitoring(server.hosts, session_timeout=20.0) as (monitor, rec):
            await eventually(lambda: len(monitor.watcher.members()) == 5)
            mark, slowest = len(rec.events), 0.0
            for _ in range(runs):
                down_at = time.monotonic()
                await asyncio.to_thread(server.restart)
                slowest = max(slowest, time.monotonic() - down_at)
                await eventually(lambda: monitor.health()[0] and all(e.healthy for e in engines))
            await asyncio.sleep(1.0)
            # A restart slower than the session timeout (a loaded machine) really expires
            # sessions: those engines re-register, and their loss must be reported.
            expired = {e.engine_id for e in engines if e.status()["registrations"] > 1}
            about = Counter(e.engine_id for e in rec.events[mark:] if e.type in ENGINE_EVENTS)
            false = sum(n for name, n in about.items() if name not in expired)
            lost = sum(1 for name in expired if not rec.of("engine_lost", name)
                       and not rec.of("engine_restarted", name))  # fmt: skip
            seen = [(e.type.value, e.engine_id) for e in rec.events[mark:]]
    finally:
        for engine in engines:
            await engine.stop()
        await asyncio.to_thread(server.stop)
    name = f"10 ZooKeeper restarts, 5 engines (slowest {slowest:.0f} s, {len(expired)} expired)"
    report(name, runs, len(expired), false, lost, started)
    assert (false, lost) == (0, 0), seen


async def test_leader_killed_in_a_three_server_ensemble(tmp_path: Path):
    started, runs, false, lost = time.monotonic(), 2, 0, 0
    ensemble = Ensemble(data_dir=tmp_path / "ensemble")
    await asyncio.to_thread(ensemble.start)
    engines = [registration(ensemble.hosts, f"q{i}") for i in range(5)]
    try:
        await _started(*engines)
        async with monitoring(ensemble.hosts) as (monitor, rec):
            await eventually(lambda: len(monitor.watcher.members()) == 5)
            for run in range(runs):
                mark = len(rec.events)
                leader = await eventually(ensemble.leader, "a leader")
                await asyncio.to_thread(ensemble.kill, leader)
                await eventually(partial(_new_leader, ensemble, leader), "a new leader")
                await eventually(lambda: monitor.health()[0], "monitor fresh", timeout=60)
                await engines[run].stop()  # events still delivered after the election
                extra = registration(ensemble.hosts, f"new{run}")
                engines.append(extra)
                await _started(extra)
                await eventually(partial(_engine_events_since, rec, mark, 2))
                await asyncio.sleep(1.0)
                kinds = engine_events(rec.events[mark:])
                got: Departures = Counter(
                    (e.type, e.engine_id) for e in rec.events[mark:] if e.type in kinds
                )
                want: Departures = Counter(
                    {
                        (EventType.ENGINE_LEFT, f"q{run}"): 1,
                        (EventType.ENGINE_JOINED, f"new{run}"): 1,
                    }
                )
                false += sum((got - want).values())
                lost += sum((want - got).values())
                await asyncio.to_thread(ensemble.start, leader)  # back as a follower
    finally:
        for engine in engines:
            await engine.stop()
        await asyncio.to_thread(ensemble.stop)
    report("3-server ensemble, leader SIGKILLed", runs, 2 * runs, false, lost, started)
    assert (false, lost) == (0, 0)


async def test_forced_session_expiries_are_restarts_not_alerts(
    zk_server: ZooKeeperServer, zk_hosts: str
):
    started, runs = time.monotonic(), 100
    engine = registration(zk_hosts, "exp", session_timeout=4.0)
    await _started(engine)
    alerts: list[str] = []
    try:
        async with monitoring(zk_hosts) as (monitor, rec):
            route = monitor.alerts._route

            def counted(event: Event) -> None:
                alerts.append(event.type.value)
                route(event)

            monitor.alerts._route = counted  # type: ignore[method-assign]
            await eventually(lambda: monitor.watcher.members())
            for run in range(runs):
                await _expire_once(zk_server, monitor, engine, run)
            await asyncio.sleep(6.0)  # past the grace: any offline alert would be out
            counts = engine_events(rec.events)
    finally:
        await engine.stop()
    seen = counts[EventType.ENGINE_RESTARTED] + counts[EventType.ENGINE_JOINED]  # no baseline join
    false = counts[EventType.ENGINE_LEFT] + alerts.count("engine_lost")
    lost = runs - seen
    assert engine.status()["registrations"] == runs + 1
    report("100 forced session expiries", runs, runs, false, lost, started)
    assert (false, lost) == (0, 0)


def _has(rec: Recorder, mark: int, kind: EventType) -> bool:
    return any(e.type is kind for e in rec.events[mark:])


async def test_partition_longer_than_the_session(zk_server: ZooKeeperServer, zk_hosts: str):
    started, runs, false, lost, took = time.monotonic(), 3, 0, 0, []
    proxy = DelayProxy(zk_server.host, zk_server.port).start()
    engine = registration(proxy.hosts + zk_hosts[len(zk_server.hosts) :], "cut", 4.0)
    try:
        await _started(engine)
        async with monitoring(zk_hosts) as (monitor, rec):
            await eventually(lambda: monitor.watcher.members())
            for _ in range(runs):
                mark, cut_at = len(rec.events), time.monotonic()
                proxy.cut()
                await eventually(lambda: not engine.healthy, "the engine knows", timeout=30)
                took.append(time.monotonic() - cut_at)
                await eventually(partial(_has, rec, mark, EventType.ENGINE_LOST), timeout=30)
                proxy.heal()
                await eventually(lambda: engine.healthy and monitor.watcher.members(), timeout=60)
                await asyncio.sleep(1.0)
                got = Counter(e.type for e in rec.events[mark:] if e.type in ENGINE_EVENTS)
                got.pop(EventType.CLUSTER_EMPTY, None)
                back = got[EventType.ENGINE_JOINED] + got[EventType.ENGINE_RESTARTED]
                want = Counter({EventType.ENGINE_LOST: 1})
                lost += sum((want - got).values()) + (back == 0)
                false += sum((got - want).values()) - min(back, 1)
    finally:
        await engine.stop()
        await asyncio.to_thread(proxy.stop)
    slowest = max(took)
    report(f"partition > 4 s session (503 after <= {slowest:.1f} s)", runs, 2 * runs, false,
           lost, started)  # fmt: skip
    assert (false, lost) == (0, 0)


async def test_a_thousand_engines_churning_behind_a_slow_link(
    zk_server: ZooKeeperServer, zk_hosts: str
):
    """Every leave is graceful; the monitor's link has 0.6 s added each way; 20 crash."""
    started = time.monotonic()
    proxy = DelayProxy(zk_server.host, zk_server.port, delay=0.6).start()
    crashers = [FakeEngine(zk_hosts, "/netdiscovery", f"crash{i}", 2.0) for i in range(20)]
    monitor_hosts = proxy.hosts + zk_hosts[len(zk_server.hosts) :]
    try:
        async with monitoring(monitor_hosts) as (monitor, rec):
            for engine in crashers:
                await asyncio.to_thread(engine.join)
            await eventually(lambda: len(monitor.watcher.members()) == 20, timeout=60)
            results, events = await _churn(zk_hosts, monitor, rec, crashers)
    finally:
        for engine in crashers:
            await asyncio.to_thread(engine.close)
        await asyncio.to_thread(proxy.stop)
    by = Counter((e.type, (e.engine_id or "").startswith("crash")) for e in events)
    restarts = [e for e in events if e.type is EventType.ENGINE_RESTARTED]
    leaves = by[(EventType.ENGINE_LEFT, False)] + len(restarts)
    crash_losses = Counter(e.engine_id for e in events if e.type is EventType.ENGINE_LOST
                           and (e.engine_id or "").startswith("crash"))  # fmt: skip
    false = by[(EventType.ENGINE_LOST, False)] + sum(
        not e.detail["previous_left"] for e in restarts
    )
    false += sum(n - 1 for n in crash_losses.values() if n > 1)
    lost = sum(1 for engine in crashers if crash_losses[engine.engine_id] == 0)
    name = f"1,000 engines churning, +0.6 s each way: {results['leaves']} leaves, 20 crashes"
    report(name, 1, leaves + len(crashers), false, lost, started)
    assert (false, lost) == (0, 0), by


async def _churn(
    zk_hosts: str, monitor: Monitor, rec: Recorder, crashers: list[FakeEngine]
) -> tuple[dict[str, int], list[Event]]:
    """Four processes of 250 engines (25 per session), all leaves graceful; crash 20 midway.

    Up to 3 s between one engine's operations, so that most of them are seen by a
    monitor whose every round trip takes 1.2 s more.

    The events are taken before the churn processes close their sessions (which
    makes every node they still hold vanish: real losses, not part of the count).
    """
    chroot_hosts = zk_hosts
    procs = await asyncio.gather(
        *(_spawn_churn(chroot_hosts, f"w{i}-", 250, 6, "--graceful-only", "--per-client", "25",
                       "--pause", "3.0")
          for i in range(4))
    )  # fmt: skip
    try:
        for proc in procs:
            await _tell(proc, b"go\n")
        await asyncio.sleep(1.0)
        for engine in crashers:  # their sessions end: the nodes vanish, no tombstone
            await asyncio.to_thread(engine.client.stop)
        results = []
        for proc in procs:
            assert proc.stdout is not None
            results.append(json.loads(await asyncio.wait_for(proc.stdout.readline(), 600)))
        truth = {name: czxid for r in results for name, czxid in r["held"].items()}
        await eventually(
            lambda: {m.name: m.czxid for m in monitor.watcher.members()} == truth,
            "the monitor's view equals the truth",
            timeout=300,
        )
        await asyncio.sleep(2.0)
        return {"leaves": sum(r["leaves"] for r in results)}, list(rec.events)
    finally:
        for proc in procs:
            await _tell(proc, b"bye\n")
            await proc.wait()
