"""An engine's ephemeral node in ZooKeeper, kept present and owned by its session.

Naive membership code creates its node once and is gone for good after a session
expiry (``docs/architecture.md``, "What ZooKeeper guarantees"). Here the flow is:

1. ``start()`` builds one ``KazooClient`` (connection retried for ever) and starts
   it with ``start_async``; it returns at once, even when ZooKeeper is down.
2. kazoo's threads only hand state changes and watch events to the loop
   (``netdisco.cluster.zk``); every ZooKeeper call is an awaited ``*_async`` call.
3. One reconcile task is woken by CONNECTED, by the exists-watch on our node, by
   ``data_changed()`` and by a periodic audit. It makes the node exist, be owned
   by the current session and hold the current data: a node left by one of our
   older sessions (same incarnation) is deleted and re-created; a node of another
   live session (duplicate id, or a crashed incarnation not yet expired) is
   waited out on the watch, unhealthy meanwhile.
4. After a session timeout spent SUSPENDED the registration counts as lost
   (Curator's local expiry) until a reconcile confirms it again.
5. ``stop()`` writes ``state: leaving``, deletes the node, then closes the session.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from enum import StrEnum
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

from netdisco.cluster.contract import EnginePayload, NodeState, engine_path, parse_payload
from netdisco.cluster.settings import DigestCredentials, ZooKeeperSettings
from netdisco.cluster.zk import Bridge, wait_result
from netdisco.exceptions import RegistrationError

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
    ) -> None:
        self.settings = settings
        self.engine_id = engine_id
        self.path = engine_path(settings.root, engine_id)
        self._describe = describe
        self._credentials: DigestCredentials | None = settings.credentials()
        self._client_factory = client_factory
        self._client: KazooClient | None = None
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._watch: Callable[[WatchedEvent], None] | None = None
        self._listener: Callable[[Any], bool] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._state = RegistryState.STOPPED
        self._detail = "not started"
        self._since = time.time()
        self._connection = "closed"
        self._session_id: int | None = None
        self._written: tuple[bytes, int] | None = None  # last data we wrote, its version
        self._waiting_for: int | None = None
        self._registrations = 0
        self._stopping = False

    # -- public interface -------------------------------------------------------

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
        self._timer = loop.call_later(self.settings.session_timeout, self._on_timeout)
        self._task = asyncio.create_task(self._run(), name=f"zk-registration:{self.path}")
        client.start_async()  # the returned Event is ignored: the listener says CONNECTED
        self._log("info", "zk connecting", hosts=self.settings.hosts)

    def data_changed(self) -> None:
        """Engine data changed: wake the reconcile task; bursts coalesce into one write."""
        if self._task is not None and not self._stopping:
            self._wake.set()

    async def stop(self) -> None:
        """Write ``state: leaving``, delete our node, then stop and close the client."""
        client = self._client
        if client is None or self._stopping:
            return
        self._stopping = True
        self._cancel_timer()
        if self._task is not None:
            self._task.cancel()
            await asyncio.wait([self._task])
        try:
            if self._state is RegistryState.REGISTERED and self._connection == "connected":
                await self._leave(client)
        finally:
            self._set_state(RegistryState.STOPPED, "stopped")
            self._connection = "closed"
            client.remove_listener(self._listener)
            await asyncio.to_thread(_shutdown, client)
            self._client = None

    # -- events handed over from kazoo's threads (run on the loop) ---------------

    def _on_state(self, state: KazooState) -> None:
        if self._stopping:
            return
        if state == KazooState.CONNECTED:
            self._cancel_timer()
            self._connection = "connected"
            client_id = self._client.client_id if self._client is not None else None
            self._session_id = None if client_id is None else client_id[0]
            self._log("info", "zk connected", session_id=self.status()["session_id"])
            self._wake.set()
        elif state == KazooState.SUSPENDED:
            self._connection = "suspended"
            self._log("warning", "zk connection suspended; our node stays until the session ends")
            if self._timer is None:
                loop = asyncio.get_running_loop()
                self._timer = loop.call_later(self.settings.session_timeout, self._on_timeout)
        else:
            self._connection = "lost"
            self._cancel_timer()
            self._unregister("ZooKeeper session lost; re-registering once reconnected")

    def _on_node_event(self, event: WatchedEvent) -> None:
        del event  # every event on our node means the same: look again
        self._wake.set()

    def _on_timeout(self) -> None:
        """A session timeout passed without a connection: say so, Curator-style."""
        self._timer = None
        if self._state is RegistryState.CONNECTING:
            self._log("warning", "zk unreachable; engine runs unregistered until it answers")
            self._detail = "ZooKeeper unreachable; will register as soon as it answers"
        else:
            self._unregister(
                f"no ZooKeeper connection for {self.settings.session_timeout:g} s "
                "(the session timeout): the server has probably removed our node"
            )

    # -- the reconcile task ------------------------------------------------------

    async def _run(self) -> None:
        while True:
            try:
                async with asyncio.timeout(self.settings.audit_interval):
                    await self._wake.wait()
            except TimeoutError:
                pass  # the periodic audit
            self._wake.clear()
            if self._connection == "connected":
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
        elif stat.ephemeralOwner == client_id[0]:
            await self._keep(client, stat)
        else:
            await self._foreign(client)

    async def _create(self, client: KazooClient) -> None:
        data = self._payload(NodeState.RUNNING)
        acl = None if self._credentials is None else self._credentials.node_acl()
        try:
            _, stat = await wait_result(
                client.create_async(self.path, data, acl=acl, ephemeral=True, include_data=True)
            )
        except NoNodeError:
            if await self._ensure_root(client, acl):
                self._wake.set()
            return
        self._written = (data, stat.version)
        self._registrations += 1
        self._registered("created")

    async def _ensure_root(self, client: KazooClient, acl: Any) -> bool:
        """Create the root one level at a time; a concurrent creator is no error."""
        parts = self.settings.root.strip("/").split("/")
        for depth in range(1, len(parts) + 1):
            path = "/" + "/".join(parts[:depth])
            try:
                await wait_result(client.create_async(path, b"", acl=acl))
            except NodeExistsError:
                continue
            except NoNodeError:
                self._set_state(RegistryState.ERROR, "the chroot in zookeeper.hosts is missing")
                self._log("error", "zk chroot missing", hosts=self.settings.hosts)
                return False
        return True

    async def _keep(self, client: KazooClient, stat: Any) -> None:
        """Our node: rewrite its data when the engine's (or anyone's) change left it stale."""
        data = self._payload(NodeState.RUNNING)
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
        """Write ``leaving`` and delete, as one transaction: one round trip, all or nothing.

        Watchers see the data change before the deletion, which tells a leave from a
        crash. If our idea of the node's version is stale (a write was in flight), the
        version is read again, once per try; a node changed behind our back is left to
        the session close.
        """
        self._set_state(RegistryState.LEAVING, "leaving")
        version = self._written[1] if self._written is not None else None
        try:
            async with asyncio.timeout(min(2.0, self.settings.session_timeout)):
                for _ in range(3):
                    if version is None:
                        version = await self._own_version(client)
                    if await self._commit_leave(client, version):
                        self._log("info", "zk deregistered")
                        return
                    version = None
                raise BadVersionError("our node kept changing while we left")
        except Exception as exc:
            self._log(
                "warning",
                "zk leave incomplete; closing the session removes the node",
                error=type(exc).__name__,
            )

    async def _own_version(self, client: KazooClient) -> int:
        """The version of our node, which must be owned by our session."""
        stat = await wait_result(client.exists_async(self.path))
        if stat is None or stat.ephemeralOwner != self._session_id:
            raise NoNodeError("our node is gone or owned by another session")
        return int(stat.version)

    async def _commit_leave(self, client: KazooClient, version: int) -> bool:
        """True when the leave was applied; False when ``version`` was stale."""
        transaction = client.transaction()
        transaction.set_data(self.path, self._payload(NodeState.LEAVING), version=version)
        transaction.delete(self.path, version=version + 1)
        results = await wait_result(transaction.commit_async())
        if any(isinstance(r, BadVersionError) for r in results):
            return False
        for result in results:
            if isinstance(result, Exception):
                raise result
        return True

    # -- helpers -----------------------------------------------------------------

    def _payload(self, node_state: NodeState) -> bytes:
        return self._describe().with_state(node_state).to_json()

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


def _shutdown(client: KazooClient) -> None:
    """Close the session (the server drops any ephemeral left) and free the threads."""
    try:
        client.stop()
    finally:
        client.close()
