"""Registration in ZooKeeper against a real server (tickTime 500 ms, session timeout 2 s)."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError, NotEmptyError
from kazoo.security import Permissions, make_acl

from netdisco.cluster.contract import CONTRACT, tombstone_path, tombstone_root
from netdisco.cluster.registry import Registration, ZooKeeperSettings
from netdisco.cluster.zk import _mark_kazoo_thread, on_kazoo_thread, wait_result
from netdisco.exceptions import ConfigError, RegistrationError
from netdisco.testing import ZooKeeperServer, eventually, four_letter
from tests.faults.proxy import DelayProxy

from .registry_support import Describe, Guard, hijack_session, read_node

T = 2.0  # session timeout used throughout
PATH = "/netdiscovery/engine-1"
PROC = Path(__file__).with_name("registry_proc.py")

Make = Callable[..., Awaitable[Registration]]


@pytest.fixture
def guard() -> Iterator[Guard]:
    """Every client the registrations build; no kazoo call may come from a kazoo thread."""
    recorded = Guard()
    yield recorded
    assert recorded.violations == []


async def _client(hosts: str, **kwargs: Any) -> KazooClient:
    client = KazooClient(hosts=hosts, **kwargs)
    await asyncio.to_thread(client.start, 15)
    return client


async def _close(client: KazooClient) -> None:
    await asyncio.to_thread(lambda: (client.stop(), client.close()))


@pytest.fixture
async def observer(zk_hosts: str) -> AsyncIterator[KazooClient]:
    """A separate, unauthenticated client that looks at the nodes."""
    client = await _client(zk_hosts)
    yield client
    await _close(client)


@pytest.fixture
async def make(guard: Guard) -> AsyncIterator[Make]:
    """Build (and by default start) registrations; all are stopped at teardown."""
    made: list[Registration] = []

    async def build(
        hosts: str,
        engine_id: str = "engine-1",
        describe: Describe | None = None,
        **settings: Any,
    ) -> Registration:
        options: dict[str, Any] = {"session_timeout": T, "audit_interval": 1.0, **settings}
        zk = ZooKeeperSettings(hosts=hosts, **options)
        registration = Registration(
            zk, engine_id, describe or Describe(engine_id), client_factory=guard.factory
        )
        made.append(registration)
        await registration.start()
        return registration

    yield build
    await asyncio.gather(*(registration.stop() for registration in made))


@pytest.fixture
def own_zk() -> Iterator[ZooKeeperServer]:
    """A private server this test may stop and restart (never the shared one).

    It grants sessions up to a minute, for the restart test that needs one to outlive
    a JVM's start on a loaded machine.
    """
    server = ZooKeeperServer(max_session_ms=60_000)
    yield server
    server.stop(signal.SIGKILL)
    server.close()


@pytest.fixture
def spawn(tmp_path: Path) -> Iterator[Callable[[str, str], subprocess.Popen[bytes]]]:
    """Start ``registry_proc.py`` engines; any still running are killed by pid at teardown."""
    procs: list[subprocess.Popen[bytes]] = []

    def start(hosts: str, engine_id: str) -> subprocess.Popen[bytes]:
        log = open(tmp_path / f"{engine_id}.log", "wb")  # noqa: SIM115 - owned by the child
        proc = subprocess.Popen(
            [sys.executable, str(PROC), hosts, engine_id, str(T)],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        procs.append(proc)
        return proc

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGCONT)
            proc.kill()
            proc.wait(10)


async def _registered(registration: Registration) -> None:
    await eventually(lambda: registration.healthy, f"{registration.path} registered")


# -- the lifecycle ------------------------------------------------------------------


async def test_register_data_and_deregister(
    zk_hosts: str, observer: KazooClient, make: Make, guard: Guard
) -> None:
    describe = Describe("engine-1")
    registration = await make(zk_hosts, describe=describe)
    await _registered(registration)

    node = await read_node(observer, PATH)
    assert node is not None
    assert node.data == {**describe.data, "state": "running", "contract": CONTRACT}
    status = registration.status()
    assert status["state"] == "registered"
    assert status["path"] == PATH
    assert status["session_id"] == f"0x{node.owner:x}"
    assert status["registrations"] == 1
    assert json.loads(json.dumps(status)) == status

    seen: list[str] = []  # what a watcher sees: the leaving write, then the deletion
    observer.get(PATH, watch=lambda event: seen.append(event.type))
    await registration.stop()
    assert await read_node(observer, PATH) is None
    assert not registration.healthy
    assert registration.status()["state"] == "stopped"
    assert [name for name, _ in guard.calls].count("transaction") == 1
    await eventually(lambda: seen == ["CHANGED"], "the data watch fired for the leaving write")
    tomb = await read_node(observer, tombstone_path("/netdiscovery", "engine-1", node.czxid))
    assert tomb is not None, "the leave left its tombstone, in the same transaction"
    assert tomb.owner == 0  # persistent: it outlives the session
    assert tomb.data["state"] == "leaving"
    assert tomb.data["incarnation"] == describe.data["incarnation"]


async def test_start_twice_is_refused(zk_hosts: str, make: Make) -> None:
    registration = await make(zk_hosts)
    with pytest.raises(RegistrationError, match="already started"):
        await registration.start()


async def test_data_changes_are_coalesced_into_one_write(
    zk_hosts: str, observer: KazooClient, make: Make, guard: Guard
) -> None:
    describe = Describe("engine-1")
    registration = await make(zk_hosts, describe=describe)
    await _registered(registration)
    writes_before = guard.count("set_async")

    spiders = [{"name": "quotes", "state": "running"}]
    describe.data["spiders"] = spiders
    for _ in range(5):
        registration.data_changed()

    async def rewritten() -> bool:
        node = await read_node(observer, PATH)
        return node is not None and node.data["spiders"] == spiders

    await eventually(rewritten, "node data shows the new spider")
    # The write's own watch wakes a re-check, which must not write again. It has ended
    # once a later look has begun (reconciles run one at a time): wait for that look,
    # which the test asks for itself (nothing changed: it must not write either).
    wrote = max(i for i, (name, _) in enumerate(guard.calls) if name == "set_async")
    await eventually(lambda: _looks_after(guard, wrote) >= 1, "the re-check", timeout=20)
    registration.data_changed()
    await eventually(lambda: _looks_after(guard, wrote) >= 2, "a look after it", timeout=20)
    assert guard.count("set_async") == writes_before + 1


async def test_data_overwritten_by_someone_else_is_restored(
    zk_hosts: str, observer: KazooClient, make: Make
) -> None:
    registration = await make(zk_hosts)
    await _registered(registration)
    await wait_result(observer.set_async(PATH, b'{"id": "vandal"}'))

    async def restored() -> bool:
        node = await read_node(observer, PATH)
        return node is not None and node.data.get("id") == "engine-1"

    await eventually(restored, "our data written back")


# -- healing --------------------------------------------------------------------------


async def test_forced_session_expiry_brings_the_node_back(
    zk_hosts: str, observer: KazooClient, make: Make, guard: Guard
) -> None:
    registration = await make(zk_hosts)
    await _registered(registration)
    first = await read_node(observer, PATH)
    assert first is not None

    await hijack_session(zk_hosts, guard.clients[0].client_id)

    async def recreated() -> bool:
        node = await read_node(observer, PATH)
        return node is not None and node.owner != first.owner

    await eventually(recreated, "node re-created by a new session")
    await _registered(registration)
    node = await read_node(observer, PATH)
    assert node is not None
    assert registration.status()["session_id"] == f"0x{node.owner:x}"
    assert registration.status()["registrations"] == 2


async def test_node_of_our_older_session_is_replaced(
    zk_hosts: str, observer: KazooClient, make: Make
) -> None:
    describe = Describe("engine-1")
    stale = json.dumps({**describe.data, "state": "running"}).encode()
    await wait_result(observer.create_async(PATH, stale, ephemeral=True, makepath=True))
    stale_node = await read_node(observer, PATH)
    assert stale_node is not None

    registration = await make(zk_hosts, describe=describe)
    await _registered(registration)
    node = await read_node(observer, PATH)
    assert node is not None
    assert node.owner != stale_node.owner
    assert registration.status()["session_id"] == f"0x{node.owner:x}"


async def test_duplicate_id_waits_then_takes_over(
    zk_hosts: str, observer: KazooClient, make: Make
) -> None:
    first = await make(zk_hosts, describe=Describe("engine-1"))
    await _registered(first)
    second_describe = Describe("engine-1")
    with structlog.testing.capture_logs() as logs:
        second = await make(zk_hosts, describe=second_describe)
        await eventually(lambda: second.status()["state"] == "waiting", "second one waits")
    assert not second.healthy
    assert "another live session" in second.status()["detail"]
    assert any("another live session" in entry["event"] for entry in logs)

    await first.stop()
    await _registered(second)
    node = await read_node(observer, PATH)
    assert node is not None
    assert node.data["incarnation"] == second_describe.data["incarnation"]
    assert second.status()["session_id"] == f"0x{node.owner:x}"


async def test_twenty_engines_at_once_race_for_the_root(
    zk_hosts: str, observer: KazooClient, make: Make
) -> None:
    registrations = await asyncio.gather(*(make(zk_hosts, f"engine-{n}") for n in range(20)))
    await eventually(lambda: all(r.healthy for r in registrations), "all 20 registered", timeout=30)
    children = await wait_result(observer.get_children_async("/netdiscovery"))
    assert sorted(children) == sorted(f"engine-{n}" for n in range(20))


async def test_missing_chroot_is_an_error_not_a_busy_loop(
    zk_server: ZooKeeperServer, make: Make, guard: Guard
) -> None:
    # no audit meanwhile: every look at the node is one that the test asked for
    hosts = f"{zk_server.hosts}/no-such-chroot-{os.getpid()}"
    registration = await make(hosts, audit_interval=3600.0)
    await eventually(lambda: registration.status()["state"] == "error", "error reported")
    assert "chroot" in registration.status()["detail"]
    # after each try it waits to be woken (a retry loop without a pause never would),
    # having made one look and one create (the root's create then finds the chroot gone)
    await eventually(lambda: _idle(registration), "waiting after the first try", timeout=20)
    assert guard.count("exists_async") == guard.count("create_async", PATH) == 1
    registration.data_changed()
    await eventually(lambda: guard.count("exists_async") >= 2, "a second look", timeout=20)
    await eventually(lambda: _idle(registration), "waiting after the second try", timeout=20)
    assert guard.count("exists_async") == guard.count("create_async", PATH) == 2


# -- processes and the server going away ----------------------------------------------


async def _owner(observer: KazooClient, path: str) -> int | None:
    node = await read_node(observer, path)
    return None if node is None else node.owner


async def test_sigkill_node_gone_within_session_timeout(
    zk_server: ZooKeeperServer,
    zk_hosts: str,
    observer: KazooClient,
    spawn: Callable[[str, str], subprocess.Popen[bytes]],
) -> None:
    proc = spawn(zk_hosts, "engine-k")
    path = "/netdiscovery/engine-k"
    await eventually(lambda: _exists(observer, path), "subprocess registered")
    owner = await _owner(observer, path)
    assert owner, "an ephemeral node"
    # The fix, as decided: the node lives by a session that ZooKeeper granted T
    # (it expires T after the last ping, on its own clock), not by a longer default.
    granted = await asyncio.to_thread(_granted_ms, zk_server, owner)
    assert granted == T * 1000, f"session 0x{owner:x} was granted {granted} ms, not {T} s"
    proc.kill()
    # ZooKeeper's expiry ends this wait; the deadline only bounds a broken run
    await eventually(lambda: _gone(observer, path), "node gone after SIGKILL", timeout=8 * T)


async def test_sigstop_beyond_timeout_then_sigcont_node_back(
    zk_hosts: str, observer: KazooClient, spawn: Callable[[str, str], subprocess.Popen[bytes]]
) -> None:
    proc = spawn(zk_hosts, "engine-s")
    path = "/netdiscovery/engine-s"
    await eventually(lambda: _exists(observer, path), "subprocess registered")
    owner = await _owner(observer, path)
    proc.send_signal(signal.SIGSTOP)
    await eventually(lambda: _gone(observer, path), "session expired while stopped")
    proc.send_signal(signal.SIGCONT)

    async def back() -> bool:
        new = await _owner(observer, path)
        return new is not None and new != owner

    await eventually(back, "node back under a new session after SIGCONT")
    proc.send_signal(signal.SIGTERM)
    assert await asyncio.to_thread(proc.wait, 15) == 0
    assert await read_node(observer, path) is None  # left cleanly on SIGTERM


async def test_a_server_gone_past_the_session_timeout_reads_as_expired(
    own_zk: ZooKeeperServer, make: Make
) -> None:
    await asyncio.to_thread(own_zk.start)
    registration = await make(own_zk.hosts)  # T: expired locally T/3 after the loss
    await _registered(registration)
    await asyncio.to_thread(own_zk.stop)
    # local expiry: a session timeout without a connection means "not registered"
    await eventually(lambda: registration.status()["state"] == "expired", "locally expired")
    assert not registration.healthy
    await asyncio.to_thread(own_zk.start)
    await _registered(registration)  # and once the server answers, registered again


async def test_server_restart_keeps_the_node_without_a_storm(
    own_zk: ZooKeeperServer, make: Make, guard: Guard
) -> None:
    await asyncio.to_thread(own_zk.start)
    # The session must outlive the stop and the restart: the restarted server gives it a
    # fresh timeout from the moment it loads, and kazoo waits up to the session timeout
    # divided by the number of hosts for the answer to a connect. A connect that reaches
    # the port while the JVM still starts (so slowly beside a loaded CI run that a 10 s
    # and a 45 s session both ran out) may wait that long for nothing, so the one server
    # is named three times: each try waits at most a third of the session, and the tries
    # that follow come well within it. Nothing waits for the timeout itself.
    hosts = ",".join([own_zk.hosts] * 3)
    registration = await make(hosts, session_timeout=45.0)
    await _registered(registration)
    before = await _read_once(own_zk.hosts, PATH)
    creates = guard.count("create_async", PATH)
    session = registration.status()["session_id"]

    await asyncio.to_thread(own_zk.stop)
    await eventually(lambda: registration.status()["connection"] != "connected", "the loss")
    looks = guard.count("exists_async", PATH)
    await asyncio.to_thread(own_zk.start)
    # back: the look that follows the reconnection has ended once another has begun
    await eventually(lambda: guard.count("exists_async", PATH) > looks, "a look, reconnected")
    registration.data_changed()
    await eventually(lambda: guard.count("exists_async", PATH) > looks + 1, "a look after it")
    await _registered(registration)

    after = await _read_once(own_zk.hosts, PATH)
    assert after == before  # same node, same owner: the session survived
    assert registration.status()["session_id"] == session
    assert registration.status()["registrations"] == 1
    assert guard.count("create_async", PATH) == creates  # not one re-registration


async def test_unreachable_at_start_registers_when_it_answers(
    own_zk: ZooKeeperServer, make: Make
) -> None:
    with structlog.testing.capture_logs() as logs:
        registration = await make(own_zk.hosts)
        assert registration.status()["state"] == "connecting"
        assert not registration.healthy
        await eventually(
            lambda: any("unreachable" in entry["event"] for entry in logs), "unreachable logged"
        )
    assert "unreachable" in registration.status()["detail"]
    await asyncio.to_thread(own_zk.start)
    await _registered(registration)
    assert await _read_once(own_zk.hosts, PATH) is not None


async def _exists(observer: KazooClient, path: str) -> bool:
    return await read_node(observer, path) is not None


async def _gone(observer: KazooClient, path: str) -> bool:
    return await read_node(observer, path) is None


def _granted_ms(server: ZooKeeperServer, session: int) -> int | None:
    """The session timeout that ``server`` granted ``session`` (its ``cons`` list), in ms."""
    for line in four_letter(server.host, server.port, "cons").splitlines():
        if f"sid=0x{session:x}," in line:
            found = re.search(r"\bto=(\d+)", line)
            return int(found[1]) if found else None
    return None


def _looks_after(guard: Guard, index: int) -> int:
    """How many looks at our node (``exists``) were made after call ``index``."""
    return sum(
        1 for name, args in guard.calls[index + 1 :] if (name, args[0]) == ("exists_async", PATH)
    )


def _idle(registration: Registration) -> bool:
    """Whether the reconcile task waits to be woken (not woken already, not running)."""
    wake = registration._wake
    return bool(wake._waiters) and not wake.is_set()


async def _read_once(hosts: str, path: str) -> Any:
    client = await _client(hosts)
    try:
        return await read_node(client, path)
    finally:
        await _close(client)


# -- ACL and secrets ------------------------------------------------------------------

SECRET = "s3cret-Pw"


@pytest.fixture
async def digest(zk_hosts: str, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[str]:
    """The digest variable set; afterwards the protected nodes are removed as their owner.

    Request it before ``make``: its teardown must follow the registrations' stop.
    """
    monkeypatch.setenv("NETDISCO_TEST_ZK_DIGEST", f"engines:{SECRET}")
    yield "NETDISCO_TEST_ZK_DIGEST"
    owner = await _client(zk_hosts, auth_data=[("digest", f"engines:{SECRET}")])
    try:
        for root in (tombstone_root("/netdiscovery"), "/netdiscovery"):
            await asyncio.to_thread(owner.delete, root, recursive=True)
    finally:
        await _close(owner)


async def test_digest_acl_protects_the_node(
    zk_hosts: str, digest: str, observer: KazooClient, make: Make
) -> None:
    with structlog.testing.capture_logs() as logs:
        registration = await make(zk_hosts, digest_env=digest)
        await _registered(registration)

    node = await read_node(observer, PATH)  # anyone may read
    assert node is not None
    with pytest.raises(NoAuthError):
        await wait_result(observer.delete_async(PATH))
    with pytest.raises(NoAuthError):
        await wait_result(observer.set_async(PATH, b"{}"))
    wrong = await _client(zk_hosts, auth_data=[("digest", "engines:wrong")])
    try:
        with pytest.raises(NoAuthError):
            await wait_result(wrong.delete_async(PATH))
    finally:
        await _close(wrong)

    for path in (PATH, "/netdiscovery", tombstone_root("/netdiscovery")):
        acls, _ = await wait_result(observer.get_acls_async(path))
        perms = {(acl.id.scheme, acl.perms) for acl in acls}
        assert perms == {("world", Permissions.READ), ("digest", Permissions.ALL)}, path
    shown = json.dumps([node.data, registration.status(), logs], default=str)
    assert SECRET not in shown
    assert registration.status()["warnings"] == []


async def test_protected_roots_refuse_the_unauthenticated_and_serve_the_engine(
    zk_hosts: str, digest: str, observer: KazooClient, make: Make
) -> None:
    """ZooKeeper checks create and delete on the parent: the roots' ACLs are what protect."""
    registration = await make(zk_hosts, digest_env=digest)
    await _registered(registration)
    node = await read_node(observer, PATH)
    assert node is not None
    tombs = tombstone_root("/netdiscovery")
    attempts = [
        observer.create_async("/netdiscovery/fake", b"{}", ephemeral=True),
        observer.create_async(f"{tombs}/engine-1@{node.czxid:x}", b"{}"),
        observer.set_async("/netdiscovery", b"x"),
        observer.set_async(tombs, b"x"),
        observer.delete_async(PATH),
    ]
    for attempt in attempts:
        with pytest.raises(NoAuthError):
            await wait_result(attempt)
    other = await make(zk_hosts, "engine-2", digest_env=digest)
    await _registered(other)  # an authenticated engine may still create under the root
    await other.stop()  # ... and leave: delete, and a tombstone under the tombstone root
    assert await wait_result(observer.get_children_async(tombs)) != []
    assert await read_node(observer, "/netdiscovery/engine-2") is None


async def test_an_open_root_is_reported_when_a_digest_is_configured(
    zk_hosts: str, digest: str, observer: KazooClient, make: Make
) -> None:
    await wait_result(observer.create_async("/netdiscovery", b""))  # open to the world
    with structlog.testing.capture_logs() as logs:
        registration = await make(zk_hosts, digest_env=digest)
        await _registered(registration)
        await eventually(lambda: registration.status()["warnings"], "warning in the status")
    assert "/netdiscovery" in registration.status()["warnings"][0]
    assert any(entry["event"] == "zk root acl wrong" for entry in logs)


async def test_stop_while_the_node_is_being_created_still_leaves(
    zk_server: ZooKeeperServer, zk_hosts: str, observer: KazooClient, make: Make, guard: Guard
) -> None:
    """Stopped with its create in flight, the engine waits for it and leaves (tombstone)."""
    chroot = zk_hosts[len(zk_server.hosts) :]
    for root in ("/netdiscovery", tombstone_root("/netdiscovery")):  # so the first create lands
        await wait_result(observer.create_async(root, b""))
    proxy = DelayProxy(zk_server.host, zk_server.port, delay=0.15).start()
    try:
        registration = await make(proxy.hosts + chroot)
        await eventually(lambda: guard.count("create_async", PATH) >= 1, "create sent")
        await registration.stop()
    finally:
        await asyncio.to_thread(proxy.stop)
    assert registration.status()["registrations"] == 1, "the create landed"
    assert await read_node(observer, PATH) is None
    tombs = await wait_result(observer.get_children_async(tombstone_root("/netdiscovery")))
    assert [t.split("@")[0] for t in tombs] == ["engine-1"], "left, not lost"


async def test_own_tombstones_past_their_age_are_deleted_at_start(
    zk_hosts: str, observer: KazooClient, make: Make
) -> None:
    base = tombstone_root("/netdiscovery")
    for name in ("engine-1@a", "engine-1@b", "engine-2@c"):
        await wait_result(observer.create_async(f"{base}/{name}", b"{}", makepath=True))
    # past their age by construction: created (ctime) before the registration reads the
    # clock, so no sleep is needed to age them
    registration = await make(zk_hosts, tombstone_max_age=1e-6)
    await _registered(registration)

    async def swept() -> bool:
        children = await wait_result(observer.get_children_async(base))
        return bool(sorted(children) == ["engine-2@c", "keep"])

    await eventually(swept, "engine-1's old tombstones deleted, engine-2's kept")


# -- construction and the guard (no server) ------------------------------------------


def test_registration_checks_engine_id_and_secret_at_construction() -> None:
    settings = ZooKeeperSettings(hosts="127.0.0.1:1")
    for bad in ("", "a/b", "..", "bad\nid"):
        with pytest.raises(ConfigError) as info:
            Registration(settings, bad, Describe("x"))
        assert info.value.key == "engine.id"
    unset = ZooKeeperSettings(hosts="127.0.0.1:1", digest_env="NETDISCO_TEST_UNSET_DIGEST")
    os.environ.pop("NETDISCO_TEST_UNSET_DIGEST", None)
    with pytest.raises(ConfigError, match="digest_env"):
        Registration(unset, "engine-1", Describe("engine-1"))


async def test_a_stopped_client_answering_at_once_leaves_the_loop_thread_unmarked() -> None:
    """A client whose handler is stopped calls back on the caller's thread: the loop's
    thread must not be taken for kazoo's (every later call would read as a violation)."""
    client = KazooClient(hosts="127.0.0.1:1")  # never started: its handler is stopped
    with pytest.raises(Exception):  # noqa: B017, PT011 - whatever a closed client says
        await wait_result(client.exists_async("/x"))
    assert not on_kazoo_thread()
    client.close()


def test_guard_flags_calls_from_kazoo_threads_only() -> None:
    guard = Guard()
    client = guard.wrap(KazooClient(hosts="127.0.0.1:1"))

    def as_kazoo_thread() -> None:
        _mark_kazoo_thread()
        client.exists_async("/x")  # a closed client fails the result; no network

    def plain_thread() -> None:  # may reuse the dead thread's id: must not be flagged
        client.exists_async("/y")

    for target in (as_kazoo_thread, plain_thread):
        thread = threading.Thread(target=target)
        thread.start()
        thread.join()
    client.exists_async("/z")
    assert guard.violations == ["exists_async called from a kazoo thread"]
    client.close()


async def test_a_tombstone_root_re_created_open_is_reported_at_the_next_audit(
    zk_hosts: str, digest: str, observer: KazooClient, make: Make
) -> None:
    """The chroot is open, but the tombstone root is never empty (``keep``): an anonymous
    client cannot delete it. Deleted with the owner's rights and re-created open by the
    stranger, it is reported at the next audit."""
    registration = await make(zk_hosts, digest_env=digest)
    await _registered(registration)
    assert registration.status()["warnings"] == []
    tombs = tombstone_root("/netdiscovery")
    with pytest.raises(NotEmptyError):
        await wait_result(observer.delete_async(tombs))
    owner = await _client(zk_hosts, auth_data=[("digest", f"engines:{SECRET}")])
    try:
        await asyncio.to_thread(owner.delete, tombs, recursive=True)
    finally:
        await _close(owner)
    await wait_result(observer.create_async(tombs, b""))  # world: cdrwa
    await eventually(lambda: registration.status()["warnings"], what="the open root reported")
    assert tombs in registration.status()["warnings"][0]


async def test_a_tombstone_root_shut_to_the_cluster_is_named_and_the_leave_still_deregisters(
    zk_hosts: str, digest: str, observer: KazooClient, make: Make
) -> None:
    """A squatter made the tombstone root read-only before the cluster: the engine names
    it at start, and its leave, which cannot leave a tombstone, logs an error and still
    deletes its node (the monitor then reports engine_lost)."""
    tombs = tombstone_root("/netdiscovery")
    read_only = [make_acl("world", "anyone", read=True)]
    await wait_result(observer.create_async(tombs, b"", acl=read_only, makepath=True))
    registration = await make(zk_hosts, digest_env=digest)  # the digest fixture cleans up
    await _registered(registration)
    await eventually(lambda: registration.status()["warnings"], what="the shut root named")
    assert "does not let the digest identity create" in registration.status()["warnings"][0]
    with structlog.testing.capture_logs() as logs:
        await registration.stop()
    assert await wait_result(observer.exists_async(registration.path)) is None
    errors = [x for x in logs if x["event"] == "zk leave without tombstone"]
    assert errors, logs
    assert errors[0]["log_level"] == "error"
    assert tombs in errors[0]["detail"]
