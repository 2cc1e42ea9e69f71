"""Giving the leases of a lost engine back to the queue, within a second.

A request taken from a Redis frontier is leased to the engine incarnation that
took it (``netdisco.frontiers.redis``). Three paths return leases to the queue:

1. **Lost engine** (its znode vanished without ``state: leaving``): every engine
   that uses a Redis frontier runs a ``LeaseRecovery``, which watches the registry
   root and, on a loss, runs one Lua script per spider that moves the lost
   incarnation's leases back to the queue, and frees its bucket leases
   (``owners.recover_engine``: the buckets' new owners need not wait out the TTL).
   We chose the surviving engines over a monitor hook because the monitor is
   optional and its offline hooks wait out a grace period (15 s by default); the
   engines that need the work back are the ones watching. Several engines doing it
   at once is safe: the script is atomic and deletes the lease set it drains, so the
   first caller returns the leases and the others find none (each lease also names
   its owner, checked per id).
2. **Nothing watching** (no ZooKeeper, all watchers down): every frontier sweeps
   leases past their deadline on each heartbeat. A live engine pushes its own
   deadlines forward on that heartbeat, so the deadline measures the owner's
   silence, not the length of a download.
3. **Graceful stop**: the frontier hands its own leases back when closed.

Which engines were lost is decided exactly as the monitor decides it, with the
same pure functions of ``netdisco.cluster``: members are nodes ``(name, czxid)``
(``membership.assemble``/``diff``), so an engine that crashed and re-registered
under the same id between two listings is a restart whose old incarnation was
lost, and its leases go back at once; a node that is gone left gracefully only
if its tombstone exists (``tombstones.who_left``, read right behind the listing
that lacks it). Misjudging could only cost a duplicate fetch: requests are
at-least-once.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import structlog
from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NoNodeError
from kazoo.protocol.states import EventType, KazooState, WatchedEvent
from kazoo.retry import KazooRetry
from redis.exceptions import RedisError

from netdisco._tasks import in_own_thread
from netdisco.cluster.contract import EventType as MemberEvent
from netdisco.cluster.legacy import LeaveTimes
from netdisco.cluster.membership import Member, Parent, View, assemble, diff, gone, member_of
from netdisco.cluster.settings import ZooKeeperSettings
from netdisco.cluster.tombstones import who_left
from netdisco.cluster.zk import Bridge, close_client, wait_result
from netdisco.frontiers.redis.leases import DEFAULT_PREFIX
from netdisco.frontiers.redis.options import connect
from netdisco.frontiers.redis.owners import recover_engine

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
    ``redis_url`` is ``RedisOptions.url`` (a redis-py URL or a ``redis+cluster://``
    one): build it from a ``frontier`` setting with
    ``netdisco.frontiers.redis.lease_recovery``.
    """

    def __init__(
        self,
        zookeeper: ZooKeeperSettings,
        redis_url: str,
        *,
        prefix: str = DEFAULT_PREFIX,
        incarnation: str | None = None,
        resync: float = 5.0,
    ) -> None:
        self.settings = zookeeper
        self.prefix = prefix
        self.incarnation = incarnation
        self.resync = resync
        self.recoveries: list[Recovery] = []
        self.view = View()  # the engines as of the last listing, as the monitor keeps them
        self._redis = connect(redis_url)
        self._client: KazooClient | None = None
        self._times = LeaveTimes()  # for engines of contract 1 only
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
            await in_own_thread(partial(close_client, client), "zk-close")
        await self._redis.aclose()

    def _on_state(self, state: KazooState) -> None:
        if state == KazooState.CONNECTED:
            self._full = True  # plain watches died with the connection: re-arm them all
            self._wake.set()

    def _on_watch(self, event: WatchedEvent) -> None:
        if event.path is None:  # a session event kazoo hands to every watch (an expiry)
            self._full = True
            self._wake.set()
            return
        name = event.path.rsplit("/", 1)[-1]
        if event.type == EventType.CHANGED:
            self._times.changed(name)
        elif event.type == EventType.DELETED:
            self._times.gone(name)
        if event.type in (EventType.CHANGED, EventType.DELETED):
            self._dirty.add(name)  # look again: it may be another node under the same name
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
        prev, root = self.view, self.settings.root
        self._times.listing_sent = time.monotonic()
        try:
            children, stat = await wait_result(
                client.get_children_async(root, watch=self._watch, include_data=True)
            )
            parent = Parent(czxid=stat.czxid, cversion=stat.cversion, pzxid=stat.pzxid)
        except NoNodeError:  # no engine registered yet: be told when the root appears
            await wait_result(client.exists_async(root, watch=self._watch))
            children, parent = [], Parent(czxid=0, cversion=0, pzxid=0)
        listed_at = time.monotonic()
        wanted = [n for n in children if full or n in dirty or n not in prev.members]
        reads = await asyncio.gather(*(self._read(client, n) for n in wanted))
        view, retry = assemble(prev, children, dict(zip(wanted, reads, strict=True)), parent,
                               time.time())  # fmt: skip
        if retry:  # changed after the listing: look again at once
            self._dirty |= retry
            self._wake.set()
        departing = self._times.departing(prev, view, listed_at)
        left = await who_left(client, root, gone(prev, view), departing)
        self.view = view
        self._times.forget(prev, view, listed_at)
        for change in diff(prev, view, left).changes:
            lost = _lost_incarnation(change.type, change.member, change.previous, change.left)
            if lost is not None and lost != self.incarnation:
                await self._removed(change.name, lost)

    async def _read(self, client: KazooClient, name: str) -> Member | None:
        try:
            raw, stat = await wait_result(
                client.get_async(f"{self.settings.root}/{name}", watch=self._watch)
            )
        except NoNodeError:
            self._times.gone(name, first=True)
            return None  # the next listing reports it gone
        return member_of(name, raw, stat)

    async def _removed(self, name: str, incarnation: str) -> None:
        log.info("registry_engine_lost", engine_id=name, incarnation=incarnation)
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
                return await recover_engine(self._redis, self.prefix, incarnation)
            except RedisError as exc:
                log.warning("lease_recovery_redis_error", error=repr(exc), attempt=attempt)
                await asyncio.sleep(0.2 * 2**attempt)
        return {}


def _lost_incarnation(
    kind: MemberEvent, member: Member, previous: Member | None, left: bool
) -> str | None:
    """The incarnation whose leases a change frees: a lost node's, or a restarted
    engine's old one when that node was lost and the new node is another incarnation
    (an engine re-registering after its session expired keeps its leases)."""
    if kind is MemberEvent.ENGINE_LOST:
        return member.payload.incarnation
    if kind is MemberEvent.ENGINE_RESTARTED and previous is not None and not left:
        old = previous.payload.incarnation
        return old if old != member.payload.incarnation else None
    return None


def lease_recovery(frontier: str, zookeeper: ZooKeeperSettings, incarnation: str) -> LeaseRecovery:
    """The registry watcher an engine runs beside its Redis frontiers (one per engine)."""
    from netdisco.frontiers.redis.options import RedisOptions

    options = RedisOptions.from_url(frontier)
    return LeaseRecovery(zookeeper, options.url, prefix=options.prefix, incarnation=incarnation)
