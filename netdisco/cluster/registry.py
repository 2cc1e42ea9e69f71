"""An engine's ephemeral node in ZooKeeper, kept present and owned by its session.

Naive membership code creates its node once and is gone for good after a session
expiry (``docs/architecture.md``, "What ZooKeeper guarantees"). Here the flow is:

1. ``start()`` builds one ``KazooClient`` (connection retried for ever) and returns
   at once, even when ZooKeeper is down; every call follows ``netdisco.cluster.zk``.
2. One reconcile task is woken by CONNECTED, by the exists-watch on our node, by
   ``data_changed()`` and by a periodic audit. It makes the node exist, be owned
   by the current session and hold the current data: a node left by one of our
   older sessions (same incarnation) is deleted and re-created; a node of another
   live session (duplicate id, or a crashed incarnation not yet expired) is
   waited out on the watch, unhealthy meanwhile.
3. A third of a session timeout after SUSPENDED (kazoo's own 2/3 come first) the
   registration counts as lost (local expiry) until a reconcile confirms it.
4. ``stop()`` leaves in one transaction (``netdisco.cluster.tombstones``), then
   closes the session; a stop during a create or a reconnection waits (bounded).
5. Once per start the engine deletes its own tombstones older than
   ``tombstone_max_age`` and, with a digest, warns about a root open to the world.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from enum import StrEnum
from functools import partial
from typing import Any

import structlog
from kazoo.client import KazooClient
from kazoo.exceptions import (
    BadVersionError,
    ConnectionClosedError,
    ConnectionLoss,
    KazooException,
    NodeExistsError,
    NoNodeError,
    SessionExpiredError,
)
from kazoo.protocol.states import KazooState, WatchedEvent
from kazoo.retry import KazooRetry

from netdisco._fence import Fence
from netdisco._tasks import in_own_thread
from netdisco.cluster.acl import acl_warnings, cluster_acl, housekeep
from netdisco.cluster.contract import (
    CONTRACT,
    EnginePayload,
    NodeState,
    decode_object,
    engine_path,
    parse_payload,
)
from netdisco.cluster.proof import engine_proof, tombstone_proof
from netdisco.cluster.settings import DigestCredentials, ZooKeeperSettings
from netdisco.cluster.tombstones import Leaver, ensure_roots
from netdisco.cluster.zk import Bridge, close_client, wait_result
from netdisco.exceptions import RegistrationError, TombstoneRefused

__all__ = ["Registration", "RegistryState", "ZooKeeperSettings"]

log = structlog.get_logger(__name__)

#: Builds the client; tests inject one whose methods assert they run on the loop.
ClientFactory = Callable[..., KazooClient]

#: Reconnect quickly after a drop (forced expiry heals in ~0.2 s), but back off to
#: at most one attempt a second while ZooKeeper is down.
_RETRY_DELAY = 0.02
_RETRY_MAX_DELAY = 1.0
_TRANSIENT = (ConnectionLoss, SessionExpiredError, ConnectionClosedError)


class RegistryState(StrEnum):
    """What ``status()["state"]`` reports; only ``registered`` is healthy."""

    STOPPED = "stopped"
    CONNECTING = "connecting"  # started, never registered yet
    REGISTERED = "registered"
    WAITING = "waiting"  # our path is held by another live session
    EXPIRED = "expired"  # session lost, or locally expired while disconnected
    ERROR = "error"  # registration refused (ACL, missing chroot); retried by the audit
    LEAVING = "leaving"


class Registration:
    """Keeps ``<root>/<engine_id>`` present, current and owned by our session."""

    def __init__(
        self,
        settings: ZooKeeperSettings,
        engine_id: str,
        describe: Callable[[], EnginePayload],
        *,
        client_factory: ClientFactory = KazooClient,
        proof_key: bytes | None = None,
        fence: Fence | None = None,
    ) -> None:
        self.settings = settings
        self.fence = fence  # closed while our session may be ending (leases in Redis)
        self.engine_id = engine_id
        self._key = proof_key  # signs the node and the tombstone (netdisco.cluster.proof)
        self.path = engine_path(settings.root, engine_id)
        self._describe = describe
        self._credentials: DigestCredentials | None = settings.credentials()
        self._client_factory = client_factory
        self._client: KazooClient | None = None
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._up = asyncio.Event()  # connected right now (also while stopping)
        self._watch: Callable[[WatchedEvent], None] | None = None
        self._listener: Callable[[Any], bool] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._state = RegistryState.STOPPED
        self._detail = "not started"
        self._since = time.time()
        self._connection = "closed"
        self._session_id: int | None = None
        self._written: tuple[bytes, int] | None = None  # last data we wrote, its version
        self._czxid: int | None = None  # our node's, named by its tombstone
        self._creating = False
        self._housekept = False
        self._warnings: list[str] = []
        self._waiting_for: int | None = None
        self._registrations = 0
        self._stopping = False
        self._bound = min(2.0, settings.session_timeout)  # a create or leave may take this
        self._silent_since = self._since  # ZooKeeper's last answer (start, or a suspension)

    @property
    def healthy(self) -> bool:
        """True only while our node is known to exist and be owned by our session."""
        return self._state is RegistryState.REGISTERED

    def status(self) -> dict[str, Any]:
        """A JSON-able summary for ``GET /netdiscovery/engine`` (no secrets)."""
        sid = self._session_id
        return {
            "state": self._state.value,
            "healthy": self.healthy,
            "path": self.path,
            "hosts": self.settings.hosts,
            "session_id": None if sid is None else f"0x{sid:x}",
            "connection": self._connection,
            "detail": self._detail,
            "since": round(self._since, 3),
            "registrations": self._registrations,
            "warnings": list(self._warnings),
        }

    async def start(self) -> None:
        """Start connecting and reconciling in the background; never waits for ZooKeeper."""
        if self._client is not None or self._stopping:
            raise RegistrationError(f"registration of {self.path} was already started")
        loop = asyncio.get_running_loop()
        creds = self._credentials
        client = self._client_factory(
            hosts=self.settings.hosts,
            timeout=self.settings.session_timeout,
            connection_retry=KazooRetry(
                max_tries=-1, delay=_RETRY_DELAY, max_delay=_RETRY_MAX_DELAY
            ),
            auth_data=None if creds is None else creds.auth_data,
        )
        bridge = Bridge(client, loop)
        self._client = client
        self._watch = bridge.watcher(self._on_node_event)
        self._listener = bridge.state_listener(self._on_state)
        client.add_listener(self._listener)
        self._set_state(RegistryState.CONNECTING, "waiting for ZooKeeper to answer")
        self._connection = "connecting"
        self._silent_since = time.time()
        self._timer = loop.call_later(self.settings.session_timeout, self._on_timeout)
        self._task = asyncio.create_task(self._run(), name=f"zk-registration:{self.path}")
        client.start_async()  # the returned Event is ignored: the listener says CONNECTED
        self._log("info", "zk connecting", hosts=self.settings.hosts)

    def data_changed(self) -> None:
        """Engine data changed: wake the reconcile task; bursts coalesce into one write."""
        if self._task is not None and not self._stopping:
            self._wake.set()

    # -- from the engine's watchdog thread, while the loop is blocked ----------------

    def mark_from_thread(self, changes: Mapping[str, Any]) -> None:
        """Merge ``changes`` into the data last written and send it, without the loop.

        The one exception to the kazoo rule's "awaited on the loop": the loop is what is
        stuck. It is safe because this is not a kazoo thread (its callbacks stay free)
        and ``set_async`` only queues the request for kazoo's connection thread (a lock
        and a pipe); nothing waits for its answer. The write carries the version last
        written, so it can only change our own node; once the loop is back the reconcile
        writes the engine's data over it, at the version it then reads.
        """
        client, written = self._client, self._written
        if client is None or written is None or self._state is not RegistryState.REGISTERED:
            return
        data = {**(decode_object(written[0]) or {}), **changes}
        raw = json.dumps(data, sort_keys=True, separators=(",", ":")).encode()
        client.set_async(self.path, raw, version=written[1])

    def drop_from_thread(self) -> None:
        """Give up our node without the loop (``mark_from_thread`` says why that is
        safe): the cluster sees it lost, as for a crash, and Redis engines recover its
        leases. The exists-watch wakes the reconcile once the loop is back, and it
        registers again (a new node: ``engine_restarted``)."""
        client = self._client
        if client is None or self._state is not RegistryState.REGISTERED:
            return
        if self.fence is not None:  # the others recover our leases: none of them starts
            self.fence.lose()
        client.delete_async(self.path)

    async def stop(self) -> None:
        """Leave (``leaving``, tombstone, delete in one transaction), then close the client."""
        client = self._client
        if client is None or self._stopping:
            return
        self._stopping = True
        self._cancel_timer()
        if self._task is not None:
            if self._creating:  # let the create land, so that we can leave properly
                self._wake.set()
                await asyncio.wait([self._task], timeout=self._bound)
            self._task.cancel()
            await asyncio.wait([self._task])
        try:
            if self._state is RegistryState.REGISTERED and self._connection == "suspended":
                with contextlib.suppress(TimeoutError):  # e.g. a leader election: wait a bit
                    await asyncio.wait_for(self._up.wait(), self._bound)
            if self._state is RegistryState.REGISTERED and self._up.is_set():
                await self._leave(client)
        finally:
            self._set_state(RegistryState.STOPPED, "stopped")
            self._connection = "closed"
            client.remove_listener(self._listener)
            await in_own_thread(partial(close_client, client), "zk-close")
            self._client = None

    def _on_state(self, state: KazooState) -> None:
        (self._up.set if state == KazooState.CONNECTED else self._up.clear)()
        if self._stopping:
            return
        if state == KazooState.CONNECTED:
            self._cancel_timer()
            if self.fence is not None:
                self.fence.open()
            self._connection = "connected"
            client_id = self._client.client_id if self._client is not None else None
            self._session_id = None if client_id is None else client_id[0]
            self._log("info", "zk connected", session_id=self.status()["session_id"])
            self._wake.set()
        elif state == KazooState.SUSPENDED:
            if self.fence is not None and self._registrations:  # our node may go meanwhile
                self.fence.close("ZooKeeper connection suspended")
            self._connection = "suspended"
            self._silent_since = time.time()
            self._log("warning", "zk connection suspended; our node stays until the session ends")
            if self._timer is None:  # kazoo noticed after up to 2/3 of the session timeout
                loop = asyncio.get_running_loop()
                self._timer = loop.call_later(self.settings.session_timeout / 3, self._on_timeout)
        else:
            if self.fence is not None and self._registrations:  # our node is gone
                self.fence.close("ZooKeeper session lost")
                self.fence.lose()
            self._connection = "lost"
            self._cancel_timer()
            self._unregister("ZooKeeper session lost; re-registering once reconnected")

    def _on_node_event(self, event: WatchedEvent) -> None:
        del event  # every event on our node means the same: look again
        self._wake.set()

    @property
    def address(self) -> str:
        """The ZooKeeper servers as ``HOST:PORT,...`` (``zookeeper.hosts`` without a chroot)."""
        return self.settings.hosts.partition("/")[0]

    def _on_timeout(self) -> None:
        """A session timeout passed without a connection: say so, Curator-style, naming
        the servers and since when they have been silent."""
        self._timer = None
        since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self._silent_since))
        detail = f"unregistered: ZooKeeper {self.address} unreachable since {since}"
        if self._state is RegistryState.CONNECTING:
            self._log(
                "warning",
                "zk unreachable; engine runs unregistered until it answers",
                hosts=self.address,
                since=since,
            )
            self._detail = detail
        else:
            self._unregister(detail)

    async def _run(self) -> None:
        while not self._stopping:
            try:
                async with asyncio.timeout(self.settings.audit_interval):
                    await self._wake.wait()
            except TimeoutError:
                pass  # the periodic audit
            self._wake.clear()
            if self._connection == "connected" and not self._stopping:
                await self._reconcile_guarded()

    async def _reconcile_guarded(self) -> None:
        try:
            await self._reconcile()
        except _TRANSIENT:
            pass  # the next CONNECTED wakes us
        except (BadVersionError, NoNodeError, NodeExistsError):
            self._wake.set()  # raced with another writer: look again
        except KazooException as exc:
            self._set_state(RegistryState.ERROR, f"ZooKeeper refused: {type(exc).__name__}")
            self._log("error", "zk registration refused", error=type(exc).__name__)
        except Exception:
            self._log("exception", "zk reconcile failed; retrying at the next audit")

    async def _reconcile(self) -> None:
        client = self._client
        if client is None:
            return
        stat = await wait_result(client.exists_async(self.path, watch=self._watch))
        client_id = client.client_id
        if client_id is None:
            return  # connection dropped meanwhile
        self._session_id = client_id[0]
        if stat is None:
            await self._create(client)
            if self.healthy:
                await self._housekeep(client)
        elif stat.ephemeralOwner == client_id[0]:
            await self._keep(client, stat)
            await self._audit_acls(client)
        else:
            await self._foreign(client)

    async def _create(self, client: KazooClient) -> None:
        data = self._payload(NodeState.RUNNING)
        acl = cluster_acl(self._credentials)
        self._creating = True
        try:
            _, stat = await wait_result(
                client.create_async(self.path, data, acl=acl, ephemeral=True, include_data=True)
            )
        except NoNodeError:
            if await self._ensure_roots(client):
                self._wake.set()
            return
        finally:
            self._creating = False
        self._written, self._czxid = (data, stat.version), stat.czxid
        self._registrations += 1
        self._registered("created")

    async def _ensure_roots(self, client: KazooClient) -> bool:
        """The root and the tombstone root, with the cluster's ACL."""
        try:
            await ensure_roots(client, self.settings.root, cluster_acl(self._credentials))
        except NoNodeError:
            self._set_state(RegistryState.ERROR, "the chroot in zookeeper.hosts is missing")
            self._log("error", "zk chroot missing", hosts=self.settings.hosts)
            return False
        return True

    async def _housekeep(self, client: KazooClient) -> None:
        """Once per start: our own old tombstones go; an open root is reported."""
        if not self._housekept and not self._stopping:
            self._housekept = True
            self._warnings = await housekeep(client, self.settings, self.engine_id)

    async def _audit_acls(self, client: KazooClient) -> None:
        """Each audit: a root deleted and re-created open meanwhile is reported too."""
        if self._housekept and not self._stopping:
            self._warnings = await acl_warnings(
                client, self.settings, self.engine_id, self._warnings
            )

    async def _keep(self, client: KazooClient, stat: Any) -> None:
        """Our node: rewrite its data when the engine's (or anyone's) change left it stale."""
        data = self._payload(NodeState.RUNNING)
        self._czxid = stat.czxid
        if self._written != (data, stat.version):
            new = await wait_result(client.set_async(self.path, data, version=stat.version))
            self._written = (data, new.version)
        self._registered("confirmed")

    async def _foreign(self, client: KazooClient) -> None:
        raw, stat = await wait_result(client.get_async(self.path))
        other = parse_payload(raw)
        owner = int(stat.ephemeralOwner)
        ours = self._describe().incarnation
        if ours is not None and other.incarnation == ours:
            self._log(
                "warning", "zk replacing node left by our older session", owner=f"0x{owner:x}"
            )
            await wait_result(client.delete_async(self.path, version=stat.version))
            self._wake.set()
            return
        detail = (
            f"{self.path} is held by another live session 0x{owner:x} "
            f"(incarnation {other.incarnation!r}, host {other.host!r}, "
            f"pid {other.pid!r}); waiting for it to go"
        )
        self._set_state(RegistryState.WAITING, detail)
        if self._waiting_for != owner:
            self._waiting_for = owner
            self._log(
                "warning",
                "zk engine id in use by another live session; waiting",
                owner=f"0x{owner:x}",
                other_incarnation=other.incarnation,
            )

    async def _leave(self, client: KazooClient) -> None:
        """``leaving`` write, tombstone and delete as one transaction: all or nothing.

        A node changed behind our back three times is left to the session close.
        """
        self._set_state(RegistryState.LEAVING, "leaving")
        node = None
        if self._written is not None and self._czxid is not None:
            node = (self._czxid, self._written[1])
        leaver = Leaver(self.settings.root, self.engine_id, cluster_acl(self._credentials))
        try:
            async with asyncio.timeout(self._bound):
                await leaver.leave(client, node, self._session_id, self._leaving)
            self._log("info", "zk deregistered")
        except TombstoneRefused as exc:
            self._log("error", "zk leave without tombstone", detail=str(exc))
        except Exception as exc:
            self._log(
                "warning",
                "zk leave incomplete; closing the session removes the node",
                error=type(exc).__name__,
            )

    def _payload(self, node_state: NodeState, left: int | None = None) -> bytes:
        """The node's data; with a key, proven for our session (and ``left``: the
        tombstone of node czxid ``left``)."""
        payload = replace(self._describe().with_state(node_state), contract=CONTRACT)
        if self._key is not None and self._session_id is not None:
            url = payload.status_url or ""
            proof = engine_proof(self._key, self.engine_id, url, self._session_id)
            payload = replace(payload, proof=proof)
        if self._key is not None and left is not None:
            payload = replace(payload, left_proof=tombstone_proof(self._key, self.engine_id, left))
        return payload.to_json()

    def _leaving(self, czxid: int) -> bytes:
        return self._payload(NodeState.LEAVING, left=czxid)

    def _registered(self, how: str) -> None:
        self._waiting_for = None
        if self._state is not RegistryState.REGISTERED:
            sid = self.status()["session_id"]
            self._set_state(RegistryState.REGISTERED, f"registered as {self.path} (session {sid})")
            self._log(
                "info", "zk registered", how=how, session_id=sid, registrations=self._registrations
            )

    def _unregister(self, detail: str) -> None:
        if self._state in (RegistryState.REGISTERED, RegistryState.WAITING):
            self._set_state(RegistryState.EXPIRED, detail)
            self._log("warning", "zk registration lost", detail=detail)

    def _set_state(self, state: RegistryState, detail: str) -> None:
        if state is not self._state:
            self._since = time.time()
        self._state = state
        self._detail = detail

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _log(self, level: str, event: str, **fields: Any) -> None:
        getattr(log, level)(event, engine_id=self.engine_id, path=self.path, **fields)
