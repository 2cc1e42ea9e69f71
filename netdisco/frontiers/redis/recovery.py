"""Giving the leases of a lost engine back to the queue, within a second.

A request taken from a Redis frontier is leased to the engine incarnation that
took it (``netdisco.frontiers.redis``). Three paths return leases to the queue:

1. **Lost engine** (its znode vanished without ``state: leaving``): every engine
   that uses a Redis frontier runs a ``LeaseRecovery``, which watches the registry
   root and, on a loss, runs one Lua script per spider that moves the lost
   incarnation's leases back to the queue. We chose the surviving engines over a
   monitor hook because the monitor is optional and its offline hooks wait out a
   grace period (15 s by default); the engines that need the work back are the
   ones watching. Several engines doing it at once is safe: the script is atomic
   and deletes the lease set it drains, so the first caller returns the leases
   and the others find none (each lease also names its owner, checked per id).
2. **Nothing watching** (no ZooKeeper, all watchers down): every frontier sweeps
   leases past their deadline on each heartbeat. A live engine pushes its own
   deadlines forward on that heartbeat, so the deadline measures the owner's
   silence, not the length of a download.
3. **Graceful stop**: the frontier hands its own leases back when closed.

A graceful leaver is recognised as the monitor does: its last data said
``leaving``, or it was written just before it was deleted (the registration
writes ``leaving`` and deletes at once). Misjudging only costs a duplicate fetch:
requests are at-least-once.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import structlog
from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NoNodeError
from kazoo.protocol.states import EventType, KazooState, WatchedEvent
from kazoo.retry import KazooRetry
from redis import asyncio as aioredis
from redis.exceptions import RedisError

from netdisco.cluster.settings import ZooKeeperSettings
from netdisco.cluster.zk import Bridge, wait_result
from netdisco.frontiers.redis.leases import DEFAULT_PREFIX, recover_owner

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class Recovery:
    """One lost engine whose leases were returned (for logs, status and tests)."""

    engine_id: str
    incarnation: str
    returned: dict[str, int]
    seconds: float  # from seeing the node gone to the leases being back


class LeaseRecovery:
    """Watches the registry root; returns a lost engine's leases at once.

    Runs one reconcile task (woken by the children watch, data watches, CONNECTED
    and a periodic resync), as the monitor does, with its own ZooKeeper session.
    ``redis_url`` is a plain redis-py URL: build one from a ``frontier`` setting
    with ``netdisco.frontiers.redis.lease_recovery``.
    """

    def __init__(
        self,
        zookeeper: ZooKeeperSettings,
        redis_url: str,
        *,
        prefix: str = DEFAULT_PREFIX,
        incarnation: str | None = None,
        leave_window: float = 0.5,
        resync: float = 5.0,
    ) -> None:
        self.settings = zookeeper
        self.prefix = prefix
        self.incarnation = incarnation
        self.leave_window = leave_window
        self.resync = resync
        self.recoveries: list[Recovery] = []
        self._redis: aioredis.Redis = aioredis.Redis.from_url(redis_url, protocol=2)
        self._client: KazooClient | None = None
        self._members: dict[str, dict[str, Any]] = {}
        self._written: dict[str, float] = {}
        self._dirty: set[str] = set()
        self._full = True
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._watch: Callable[[WatchedEvent], None] | None = None

    async def start(self) -> None:
        """Connect in the background (retrying for ever) and start watching."""
        loop = asyncio.get_running_loop()
        client = KazooClient(
            hosts=self.settings.hosts,
            timeout=self.settings.session_timeout,
            connection_retry=KazooRetry(max_tries=-1, delay=0.05, max_delay=1.0),
        )
        bridge = Bridge(client, loop)
        self._watch = bridge.watcher(self._on_watch)
        bridge.add_listener(self._on_state)
        self._client = client
        self._task = asyncio.create_task(self._run(), name="lease-recovery")
        client.start_async()

    async def stop(self) -> None:
        """Stop watching and close both connections."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        client, self._client = self._client, None
        if client is not None:
            await asyncio.to_thread(_close, client)
        await self._redis.aclose()

    def _on_state(self, state: KazooState) -> None:
        if state == KazooState.CONNECTED:
            self._full = True  # plain watches died with the connection: re-arm them all
            self._wake.set()

    def _on_watch(self, event: WatchedEvent) -> None:
        name = event.path.rsplit("/", 1)[-1]
        if event.type == EventType.CHANGED:
            self._written[name] = time.monotonic()
            self._dirty.add(name)
        self._wake.set()

    async def _run(self) -> None:
        while True:
            try:
                async with asyncio.timeout(self.resync):
                    await self._wake.wait()
            except TimeoutError:
                pass
            self._wake.clear()
            client = self._client
            if client is None or not client.connected:
                continue
            try:
                await self._reconcile(client)
            except KazooException as exc:  # connection trouble: CONNECTED wakes us again
                log.warning("lease_recovery_zk_error", error=type(exc).__name__)
                self._full = True
            except Exception:  # a bug here must not end the watching for good
                log.exception("lease_recovery_failed")
                self._full = True

    async def _reconcile(self, client: KazooClient) -> None:
        full, self._full = self._full, False
        dirty, self._dirty = self._dirty, set()
        root = self.settings.root
        try:
            children = await wait_result(client.get_children_async(root, watch=self._watch))
        except NoNodeError:  # no engine registered yet: be told when the root appears
            await wait_result(client.exists_async(root, watch=self._watch))
            children = []
        for name in self._members.keys() - set(children):
            await self._removed(name, self._members.pop(name))
        for name in children:
            if full or name in dirty or name not in self._members:
                data = await self._read(client, f"{root}/{name}")
                if data is not None:
                    self._members[name] = data

    async def _read(self, client: KazooClient, path: str) -> dict[str, Any] | None:
        try:
            raw, _ = await wait_result(client.get_async(path, watch=self._watch))
        except NoNodeError:
            return None  # the next listing reports it gone
        return parse_node_data(raw)

    async def _removed(self, name: str, data: dict[str, Any]) -> None:
        written = self._written.pop(name, None)
        left = data.get("state") == "leaving" or (
            written is not None and time.monotonic() - written <= self.leave_window
        )
        incarnation = data.get("incarnation")
        log.info("registry_engine_gone", engine_id=name, left=left, incarnation=incarnation)
        if left or not isinstance(incarnation, str) or incarnation == self.incarnation:
            return
        seen_at = time.monotonic()
        returned = await self._recover(incarnation)
        recovery = Recovery(name, incarnation, returned, time.monotonic() - seen_at)
        self.recoveries.append(recovery)
        log.warning(
            "leases_recovered",
            engine_id=name,
            incarnation=incarnation,
            returned=returned,
            seconds=round(recovery.seconds, 4),
        )

    async def _recover(self, incarnation: str) -> dict[str, int]:
        """A few quick tries; if Redis stays down, the deadline sweep takes over."""
        for attempt in range(5):
            try:
                return await recover_owner(self._redis, self.prefix, incarnation)
            except RedisError as exc:
                log.warning("lease_recovery_redis_error", error=repr(exc), attempt=attempt)
                await asyncio.sleep(0.2 * 2**attempt)
        return {}


def parse_node_data(raw: bytes | None) -> dict[str, Any]:
    """An engine's node data as a dict; unreadable data counts as empty."""
    try:
        value = json.loads((raw or b"").decode())
    except (UnicodeDecodeError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def _close(client: KazooClient) -> None:
    try:
        client.stop()
    finally:
        client.close()


def lease_recovery(frontier: str, zookeeper: ZooKeeperSettings, incarnation: str) -> LeaseRecovery:
    """The registry watcher an engine runs beside its Redis frontiers (one per engine)."""
    from netdisco.frontiers.redis.options import RedisOptions

    options = RedisOptions.from_url(frontier)
    return LeaseRecovery(zookeeper, options.url, prefix=options.prefix, incarnation=incarnation)
