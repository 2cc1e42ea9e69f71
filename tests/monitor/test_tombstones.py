"""Leave or crash told by tombstones: downtime, reconnection, old engines, age, ACL."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator
from functools import partial

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError, NotEmptyError
from kazoo.security import make_acl
from structlog.testing import capture_logs

from monitor.daemon import Monitor
from netdisco.cluster.contract import tombstone_name, tombstone_root
from netdisco.exceptions import ConfigError
from netdisco.testing import eventually
from tests.monitor.conftest import REPO, Recorder, monitor_config
from tests.monitor.fake_engines import FakeEngine
from tests.monitor.service_support import steering

SECRET = "engines:t0mb-Secret"
TOMBS = tombstone_root("/netdiscovery")


def _client(hosts: str, auth: str | None = None) -> KazooClient:
    client = KazooClient(hosts=hosts, auth_data=[("digest", auth)] if auth else None)
    client.start(timeout=15)
    return client


def _events_of(rec: Recorder, name: str, count: int) -> bool:
    return len(rec.types(name)) == count


def _close(client: KazooClient) -> None:
    client.stop()
    client.close()


async def test_leaves_while_the_session_is_lost_are_leaves(zk_hosts, start_monitor, engines):
    monitor, rec = await start_monitor(monitor_config(zk_hosts))
    calm = await asyncio.to_thread(engines, "calm")
    await asyncio.to_thread(calm.join)
    await eventually(lambda: rec.of("engine_joined", "calm"))
    hijack = KazooClient(hosts=zk_hosts, client_id=monitor.watcher.client.client_id)
    await asyncio.to_thread(hijack.start, 15)  # the monitor's connection is taken over
    await asyncio.to_thread(calm.leave)
    await asyncio.to_thread(_close, hijack)  # ... and its session closed: expired
    await eventually(lambda: rec.of("zk_reconnected"), what="reconnect after expiry")
    await eventually(lambda: rec.of("engine_left", "calm"))
    assert rec.types("calm") == ["engine_joined", "engine_left"]


async def test_old_engines_fall_back_to_the_old_rule_and_say_so_once(
    zk_hosts, start_monitor, engines
):
    _, rec = await start_monitor(monitor_config(zk_hosts))
    with capture_logs() as logs:
        for name in ("old1", "old2"):
            engine = await asyncio.to_thread(engines, name, legacy=True)
            await asyncio.to_thread(engine.join)
            await eventually(partial(rec.of, "engine_joined", name))
            await asyncio.to_thread(engine.leave)
            await eventually(partial(_events_of, rec, name, 2))
    for name in ("old1", "old2"):  # the old rule: the leaving write seen just before
        assert rec.types(name) == ["engine_joined", "engine_left"]
    assert [x["event"] for x in logs].count("engines_without_tombstones") == 1


async def test_tombstones_past_their_age_are_deleted_on_resync(zk_hosts, start_monitor, engines):
    config = monitor_config(zk_hosts, zookeeper={"tombstone_max_age": 0.2, "resync_interval": 0.3})
    _, rec = await start_monitor(config)
    engine = await asyncio.to_thread(engines, "brief")
    await asyncio.to_thread(engine.join)
    await eventually(lambda: rec.of("engine_joined", "brief"))
    await asyncio.to_thread(engine.leave)
    await eventually(lambda: rec.of("engine_left", "brief"))
    admin = await asyncio.to_thread(_client, zk_hosts)
    try:
        await eventually(lambda: admin.get_children(TOMBS) == ["keep"], "the tombstone swept")
    finally:
        await asyncio.to_thread(_close, admin)


@pytest.fixture
async def digest_env(zk_hosts: str, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[str]:
    monkeypatch.setenv("TEST_MONITOR_DIGEST", SECRET)
    yield "TEST_MONITOR_DIGEST"
    owner = await asyncio.to_thread(_client, zk_hosts, SECRET)
    for root in (TOMBS, "/netdiscovery"):
        if await asyncio.to_thread(owner.exists, root):
            await asyncio.to_thread(owner.delete, root, recursive=True)
    await asyncio.to_thread(_close, owner)


async def test_a_monitor_with_a_digest_creates_protected_roots(zk_hosts, digest_env, start_monitor):
    monitor, _ = await start_monitor(monitor_config(zk_hosts, zookeeper={"digest_env": digest_env}))
    stranger = await asyncio.to_thread(_client, zk_hosts)
    try:
        for path in ("/netdiscovery/fake", f"{TOMBS}/fake@1"):
            with pytest.raises(NoAuthError):
                await asyncio.to_thread(stranger.create, path, b"{}")
    finally:
        await asyncio.to_thread(_close, stranger)
    assert monitor.health()[1]["warnings"] == []


async def test_an_open_root_fails_check_when_a_digest_is_configured(
    zk_hosts, digest_env, start_monitor
):
    admin = await asyncio.to_thread(_client, zk_hosts)
    await asyncio.to_thread(admin.create, "/netdiscovery", b"")  # open to the world
    await asyncio.to_thread(_close, admin)
    config = monitor_config(zk_hosts, zookeeper={"digest_env": digest_env})
    monitor, _ = await start_monitor(config)
    await eventually(lambda: monitor.health()[1]["warnings"], "the open root reported")
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "monitor.cli", "check", "--url", monitor.http.url, cwd=REPO,
        stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, _ = await proc.communicate()
    assert proc.returncode == 1
    assert out.decode().startswith("warning:")
    assert "/netdiscovery" in out.decode()


def test_a_missing_digest_secret_is_a_config_error(zk_hosts, monkeypatch):
    monkeypatch.delenv("TEST_MONITOR_DIGEST_UNSET", raising=False)
    config = monitor_config(zk_hosts, zookeeper={"digest_env": "TEST_MONITOR_DIGEST_UNSET"})
    with pytest.raises(ConfigError, match=r"zookeeper\.digest_env"):
        Monitor(config)


async def test_the_tombstone_root_cannot_be_taken_and_a_leave_stays_a_leave(
    zk_hosts, digest_env, start_monitor
):
    """The attack: an anonymous client deletes the empty tombstone root (its parent is
    open) and re-creates it read-only, so a SIGTERM'd engine's leave rolls back and reads
    as a crash. The root is never empty (``keep``): the delete is refused."""
    config = monitor_config(zk_hosts, zookeeper={"digest_env": digest_env, "resync_interval": 0.5})
    monitor, rec = await start_monitor(config)
    stranger = await asyncio.to_thread(_client, zk_hosts)
    owner = await asyncio.to_thread(_client, zk_hosts, SECRET)
    try:
        with pytest.raises(NotEmptyError):
            await asyncio.to_thread(stranger.delete, TOMBS)
        with pytest.raises(NoAuthError):
            await asyncio.to_thread(stranger.delete, f"{TOMBS}/keep")
        engine = FakeEngine(zk_hosts, "/netdiscovery", "kept", client=owner)
        await asyncio.to_thread(engine.join)
        await eventually(lambda: rec.of("engine_joined", "kept"))
        await asyncio.to_thread(engine.leave)
        await eventually(partial(_events_of, rec, "kept", 2))
    finally:
        await asyncio.to_thread(_close, stranger)
        await asyncio.to_thread(_close, owner)
    assert rec.types("kept") == ["engine_joined", "engine_left"]
    assert monitor.health()[1]["warnings"] == []


async def test_a_tombstone_root_shut_to_the_cluster_is_named(zk_hosts, digest_env, start_monitor):
    """A squatter made the tombstone root before the cluster did, read-only for all: the
    engines cannot leave a tombstone. The monitor's health (what check reads) says so."""
    stranger = await asyncio.to_thread(_client, zk_hosts)
    try:
        read_only = [make_acl("world", "anyone", read=True)]
        await asyncio.to_thread(stranger.create, TOMBS, b"", acl=read_only, makepath=True)
    finally:
        await asyncio.to_thread(_close, stranger)
    config = monitor_config(zk_hosts, zookeeper={"digest_env": digest_env, "resync_interval": 0.5})
    monitor, _ = await start_monitor(config)
    await eventually(lambda: monitor.health()[1]["warnings"], "the shut root reported")
    (warning,) = monitor.health()[1]["warnings"]
    assert TOMBS in warning
    assert "does not let the digest identity create" in warning


async def test_tombstones_under_a_root_taken_over_are_not_trusted(
    zk_hosts, digest_env, start_monitor
):
    """With the owner's rights the root was deleted, and a stranger re-created it open: a
    leave there proves nothing."""
    config = monitor_config(zk_hosts, zookeeper={"digest_env": digest_env, "resync_interval": 0.5})
    monitor, rec = await start_monitor(config)
    stranger = await asyncio.to_thread(_client, zk_hosts)
    owner = await asyncio.to_thread(_client, zk_hosts, SECRET)
    try:
        await asyncio.to_thread(owner.delete, TOMBS, recursive=True)
        await asyncio.to_thread(stranger.create, TOMBS, b"")  # world: cdrwa
        engine = FakeEngine(zk_hosts, "/netdiscovery", "taken", client=owner)
        await asyncio.to_thread(engine.join)
        await eventually(lambda: rec.of("engine_joined", "taken"))
        with capture_logs() as logs:
            await asyncio.to_thread(engine.leave)  # the tombstone anyone could have forged
            await eventually(partial(_events_of, rec, "taken", 2))
    finally:
        await asyncio.to_thread(_close, stranger)
        await asyncio.to_thread(_close, owner)
    assert rec.types("taken") == ["engine_joined", "engine_lost"]
    # and the health route (what `netdisco-monitor check` reads) names the open root
    await eventually(lambda: monitor.health()[1]["warnings"], "the open root reported")
    assert TOMBS in monitor.health()[1]["warnings"][0]
    untrusted = [x for x in logs if x["event"] == "tombstones_untrusted"]
    assert untrusted
    assert "not the digest's" in untrusted[0]["reason"]


async def test_a_forged_tombstone_does_not_hide_a_crash(zk_hosts, start_monitor, engines):
    """The attack, without a digest: a SIGKILLed engine's tombstone forged by anyone (the
    name is the engine's id and czxid, both readable) would make the crash read as a
    leave, and no alert would go. With the engine token the monitor trusts only a
    tombstone whose proof binds that node's czxid."""
    monitor, rec = await start_monitor(steering(zk_hosts))
    engine = await asyncio.to_thread(engines, "victim")
    czxid = await asyncio.to_thread(engine.join)
    await eventually(lambda: rec.of("engine_joined", "victim"))
    stranger = await asyncio.to_thread(_client, zk_hosts)
    try:
        forged = json.dumps({"id": "victim", "state": "leaving", "contract": 3,
                             "left_proof": "0" * 64}).encode()  # fmt: skip
        name = f"{TOMBS}/{tombstone_name('victim', czxid)}"
        await asyncio.to_thread(stranger.create, name, forged, makepath=True)
    finally:
        await asyncio.to_thread(_close, stranger)
    with capture_logs() as logs:
        await asyncio.to_thread(engine.vanish)  # its session's end, as after a kill -9
        await eventually(partial(_events_of, rec, "victim", 2))
    assert rec.types("victim") == ["engine_joined", "engine_lost"]
    assert [x["event"] for x in logs if x["event"] == "tombstone_unproven"] == [
        "tombstone_unproven"
    ]
    assert monitor.watcher.members() == []


async def test_a_proven_leave_is_a_leave_and_an_old_engine_is_said_unproven_once(
    zk_hosts, start_monitor, engines
):
    monitor, rec = await start_monitor(steering(zk_hosts))
    proven = await asyncio.to_thread(engines, "proven")
    old = FakeEngine(zk_hosts, "/netdiscovery", "old", 1.0)  # contract 3, no token: no proof
    try:
        await asyncio.to_thread(proven.join)
        await asyncio.to_thread(old.join, contract=2)
        await eventually(lambda: len(monitor.watcher.members()) == 2)
        with capture_logs() as logs:
            await asyncio.to_thread(proven.leave)
            await asyncio.to_thread(old.leave)
            await eventually(lambda: rec.of("engine_left", "proven") and rec.of("engine_lost"))
    finally:
        await asyncio.to_thread(old.close)
    assert rec.types("old") == ["engine_joined", "engine_lost"]
    assert [x["event"] for x in logs].count("engines_unproven") == 1
