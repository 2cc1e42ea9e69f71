"""Membership events against a real ZooKeeper: each reported once, with the right type."""

from __future__ import annotations

import asyncio
import signal
from functools import partial
from pathlib import Path

from kazoo.client import KazooClient
from structlog.testing import capture_logs

from netdisco.testing import eventually
from tests.monitor.conftest import monitor_config


def _close(client: KazooClient) -> None:
    client.stop()
    client.close()


def _admin(zk_hosts: str) -> KazooClient:
    client = KazooClient(hosts=zk_hosts)
    client.start(timeout=15)
    return client


async def test_join_update_leave_each_reported_once(zk_hosts, start_monitor, engines):
    monitor, rec = await start_monitor(monitor_config(zk_hosts))
    engine = await asyncio.to_thread(engines, "e1")
    czxid = await asyncio.to_thread(engine.join)
    joined = await eventually(lambda: rec.of("engine_joined", "e1"))
    assert joined[0].engine["czxid"] == czxid
    assert joined[0].engine["status_url"].startswith("http://127.0.0.1:8715/")
    await asyncio.to_thread(engine.update, spiders=[{"name": "q", "state": "paused"}])
    updated = await eventually(lambda: rec.of("engine_updated", "e1"))
    assert updated[0].engine["spiders"] == [{"name": "q", "state": "paused"}]
    assert updated[0].previous is not None
    await asyncio.to_thread(engine.leave)
    await eventually(lambda: rec.of("cluster_empty"))
    # the update says what changed too: spider q is there, paused
    assert rec.types("e1") == ["engine_joined", "engine_updated", "spider_paused", "engine_left"]
    assert monitor.watcher.members() == []


async def test_leave_is_left_and_vanish_is_lost(zk_hosts, start_monitor, engines):
    """A leave (one transaction, with its tombstone) reads as left; a bare delete as lost."""
    _, rec = await start_monitor(monitor_config(zk_hosts))
    for i in range(10):
        engine = await asyncio.to_thread(engines, f"p{i}")
        await asyncio.to_thread(engine.join)
        await eventually(partial(rec.of, "engine_joined", f"p{i}"))
        await asyncio.to_thread(engine.leave)
        await eventually(partial(rec.of, "engine_left", f"p{i}"))
        assert rec.types(f"p{i}") == ["engine_joined", "engine_left"]
    ghost = await asyncio.to_thread(engines, "ghost")
    await asyncio.to_thread(ghost.join)
    await eventually(lambda: rec.of("engine_joined", "ghost"))
    await asyncio.to_thread(ghost.vanish)
    await eventually(lambda: rec.of("engine_lost", "ghost"))
    assert rec.types("ghost") == ["engine_joined", "engine_lost"]


async def test_graceful_stop_and_sigkill_told_apart(zk_hosts, start_monitor, engine_processes):
    _, rec = await start_monitor(monitor_config(zk_hosts))
    calm = await asyncio.to_thread(engine_processes, zk_hosts, "calm")
    doomed = await asyncio.to_thread(engine_processes, zk_hosts, "doomed")
    await eventually(lambda: rec.of("engine_joined", "calm") and rec.of("engine_joined", "doomed"))
    calm.signal(signal.SIGTERM)
    doomed.signal(signal.SIGKILL)
    await eventually(lambda: rec.of("cluster_empty"), what="both gone")
    assert rec.types("calm") == ["engine_joined", "engine_left"]
    assert rec.types("doomed") == ["engine_joined", "engine_lost"]
    assert rec.of("engine_lost")[0].detail["last_seen"] > 0


async def test_restart_between_two_looks(zk_hosts, start_monitor, engines):
    _, rec = await start_monitor(monitor_config(zk_hosts))
    engine = await asyncio.to_thread(engines, "r1")
    old = await asyncio.to_thread(engine.join)
    await eventually(lambda: rec.of("engine_joined", "r1"))
    # Called on the loop's own thread, so the monitor cannot look in between.
    engine.vanish()
    engine.join()
    restarted = await eventually(lambda: rec.of("engine_restarted", "r1"))
    assert restarted[0].previous is not None
    assert restarted[0].previous["czxid"] == old
    assert restarted[0].engine["czxid"] != old
    assert rec.types("r1") == ["engine_joined", "engine_restarted"]


async def test_first_listing_is_a_baseline_and_state_file_reports_the_gap(
    zk_hosts, start_monitor, engines, tmp_path: Path
):
    stay, go = await asyncio.to_thread(engines, "stay"), await asyncio.to_thread(engines, "go")
    await asyncio.to_thread(stay.join)
    await asyncio.to_thread(go.join)
    state = tmp_path / "monitor-state.json"
    config = monitor_config(zk_hosts, alerts={"state_file": str(state)})
    first, rec1 = await start_monitor(config)
    assert len(first.watcher.members()) == 2
    await first.close()
    assert rec1.events == []  # a baseline, not a burst of joins
    await asyncio.to_thread(go.leave)
    new = await asyncio.to_thread(engines, "new")
    await asyncio.to_thread(new.join)
    second, rec2 = await start_monitor(config)
    # a sentinel joins after the first listing: once its join is reported, every event
    # of that listing is out, and a wrong extra one would be too (no fixed wait)
    sentinel = await asyncio.to_thread(engines, "sentinel")
    await asyncio.to_thread(sentinel.join)
    await eventually(lambda: rec2.of("engine_joined", "sentinel"), "its join", timeout=30)
    # "go" left while nobody watched: its tombstone says so.
    assert sorted((e.type.value, e.engine_id) for e in rec2.events) == [
        ("engine_joined", "new"),
        ("engine_joined", "sentinel"),
        ("engine_left", "go"),
    ]
    assert [m.name for m in second.watcher.members()] == ["new", "sentinel", "stay"]


async def test_root_deleted_and_recreated(zk_hosts, start_monitor, engines):
    monitor, rec = await start_monitor(monitor_config(zk_hosts))
    admin = await asyncio.to_thread(_admin, zk_hosts)
    try:
        await asyncio.to_thread(admin.delete, "/netdiscovery")
        await eventually(
            lambda: admin.exists("/netdiscovery"), what="root re-created by the monitor"
        )
        engine = await asyncio.to_thread(engines, "late")
        await asyncio.to_thread(engine.join)
        await eventually(lambda: rec.of("engine_joined", "late"))
        assert [m.name for m in monitor.watcher.members()] == ["late"]
    finally:
        await asyncio.to_thread(_close, admin)


async def test_garbage_node_is_tracked_and_logged_once(zk_hosts, start_monitor, engines):
    _, rec = await start_monitor(monitor_config(zk_hosts))
    admin = await asyncio.to_thread(_admin, zk_hosts)
    try:
        with capture_logs() as logs:
            await asyncio.to_thread(admin.create, "/netdiscovery/junk", b"\xff{not json")
            joined = await eventually(lambda: rec.of("engine_joined", "junk"))
            await asyncio.to_thread(admin.set, "/netdiscovery/junk", b"[1, 2]")
            await eventually(lambda: rec.of("engine_updated", "junk"))
            good = await asyncio.to_thread(engines, "good")
            await asyncio.to_thread(good.join)
            await eventually(lambda: rec.of("engine_joined", "good"))
        assert joined[0].engine["garbage"] is True
        assert joined[0].engine["state"] == "unknown"
        assert [x["event"] for x in logs].count("engine_data_garbage") == 1
    finally:
        await asyncio.to_thread(_close, admin)


async def test_own_session_expired_view_converges(zk_hosts, start_monitor, engines):
    monitor, rec = await start_monitor(monitor_config(zk_hosts))
    steady = await asyncio.to_thread(engines, "steady")
    bouncer = await asyncio.to_thread(engines, "bouncer")
    await asyncio.to_thread(steady.join)
    old = await asyncio.to_thread(bouncer.join)
    await eventually(lambda: len(monitor.watcher.members()) == 2)
    session_id, password = monitor.watcher.client.client_id
    hijack = KazooClient(hosts=zk_hosts, client_id=(session_id, password))
    await asyncio.to_thread(hijack.start, 15)
    await asyncio.to_thread(bouncer.vanish)  # while the monitor's session is being killed
    await asyncio.to_thread(bouncer.join)
    await asyncio.to_thread(hijack.stop)  # closes the monitor's session: expired
    await asyncio.to_thread(hijack.close)
    await eventually(lambda: rec.of("zk_reconnected"), what="reconnect after expiry")
    await eventually(lambda: monitor.watcher.fresh.is_set())
    members = {m.name: m.czxid for m in monitor.watcher.members()}
    assert members["steady"] == steady.client.exists(steady.path).czxid
    assert members["bouncer"] != old
    back = [t for t in rec.types("bouncer") if t in ("engine_restarted", "engine_joined")]
    assert back, rec.types("bouncer")  # the rejoin under the same name was reported
    assert rec.of("zk_disconnected")
    assert rec.types("steady") == ["engine_joined"]  # nothing false about the steady one
