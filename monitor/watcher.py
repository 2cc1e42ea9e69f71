"""One reconcile task that keeps a view of ``<root>``'s children and reports changes.

Wake-ups come from the children watch, from data watches on every child, from
CONNECTED and from a periodic full resync; each wake-up lists the root, re-reads
the children that are new or were notified, and diffs the result with the last
reported view (:func:`netdisco.cluster.membership.diff`). Events come from that diff,
never from counting callbacks, so missed or duplicated notifications cannot
produce wrong events. Whether a node that is gone left or was lost is read from
its tombstone right behind the listing that lacks it
(:mod:`netdisco.cluster.tombstones`), so it needs no clock and covers the time
the monitor was down or disconnected. kazoo's threads only hand events to the
loop (:class:`netdisco.cluster.zk.Bridge`); every ZooKeeper call is awaited here.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Mapping
from functools import partial
from pathlib import Path
from typing import Any

import structlog
from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NoAuthError, NoNodeError
from kazoo.protocol.states import Callback, KazooState, WatchedEvent
from kazoo.protocol.states import EventType as ZkEventType

from monitor import statefile
from monitor.events import Event, EventType, same
from netdisco.cluster.acl import cluster_acl, root_warnings, tombstones_trusted
from netdisco.cluster.contract import MAX_NODE_DATA, PROOF_CONTRACT
from netdisco.cluster.legacy import LeaveTimes
from netdisco.cluster.membership import (
    Change,
    Member,
    Parent,
    View,
    assemble,
    diff,
    gone,
    member_of,
)
from netdisco.cluster.proof import proves_engine
from netdisco.cluster.settings import ZooKeeperSettings
from netdisco.cluster.tombstones import Sweeper, ensure_roots, leave_proven, who_left
from netdisco.cluster.zk import Bridge, wait_result

log = structlog.get_logger(__name__)


class Watcher:
    """Owns the monitor's ZooKeeper session and its view of the engines.

    ``view`` is ``None`` until the first listing (the baseline, which reports
    nothing unless a ``state_file`` held an older view). ``fresh`` is set while
    the view reflects a listing made on the current connection: offline alerts
    wait for it. ``on_dropped("znode")``: a node's data passed ``MAX_NODE_DATA``
    (once per node).
    """

    def __init__(
        self,
        settings: ZooKeeperSettings,
        on_event: Callable[[Event], None],
        *,
        state_file: Path | None = None,
        on_unobserved: Callable[[int], None] | None = None,
        on_dropped: Callable[[str], None] | None = None,
        proof_key: bytes | None = None,
    ) -> None:
        self.settings = settings
        self.proof_key = proof_key  # only proven leaves are leaves (netdisco.cluster.proof)
        self._credentials = settings.credentials()  # a ConfigError naming the key if missing
        self.client = KazooClient(
            hosts=settings.hosts,
            timeout=settings.session_timeout,
            connection_retry={"max_tries": -1, "delay": 0.1, "backoff": 2, "max_delay": 2.0},
            auth_data=None if self._credentials is None else self._credentials.auth_data,
        )
        self.warnings: list[str] = []  # e.g. a root open to the world despite a digest
        self.sweeper = Sweeper(settings.root, settings.tombstone_max_age)
        self.view: View | None = None
        self.fresh = asyncio.Event()
        self.connected = False
        self.unobserved_total = 0
        self._on_event = on_event
        self._on_unobserved, self._on_dropped = on_unobserved, on_dropped
        self._state_file = state_file
        self._legacy_logged = self._sweep_denied = self._unproven_logged = False
        self._prefix = settings.root.rstrip("/") + "/"
        self._wake = asyncio.Event()
        self._full = True
        self._dirty: set[str] = set()
        self._times = LeaveTimes()  # for engines of contract 1 only (netdisco.cluster.legacy)
        self._garbage_seen: dict[str, int] = {}  # name -> czxid, of nodes in the view
        self._ever_connected = self._closing = False
        self._listed_wall = 0.0  # wall time of the listing behind ``view``
        self._task: asyncio.Task[None] | None = None
        self._save_task: asyncio.Task[None] | None = None
        self._watch: Callable[[WatchedEvent], None] | None = None

    async def start(self) -> None:
        """Connect (in the background, retrying for ever) and start reconciling."""
        if self._state_file is not None:
            self.view = statefile.load(
                self._state_file, hosts=self.settings.hosts, root=self.settings.root
            )
        bridge = Bridge(self.client, asyncio.get_running_loop())
        self._watch = bridge.watcher(self._on_watch)
        bridge.add_listener(self._on_state)
        self.client.start_async()
        self._task = asyncio.create_task(self._run(), name="monitor-reconcile")

    async def close(self) -> None:
        """Stop reconciling, persist the view, and end the session."""
        self._closing = True
        for task in (self._task, self._save_task):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        self._save_now()
        await asyncio.to_thread(self.client.stop)
        await asyncio.to_thread(self.client.close)

    def members(self) -> list[Member]:
        """The engines in the current view, by name."""
        return sorted((self.view.members if self.view else {}).values(), key=lambda m: m.name)

    # -- kazoo hand-overs (already on the loop) ---------------------------------------

    def _on_state(self, state: KazooState) -> None:
        if self._closing:
            return
        if state == KazooState.CONNECTED:
            was_down = self._ever_connected and not self.connected
            self.connected = self._ever_connected = True
            self._full = True  # kazoo does not restore watches: re-read and re-arm all
            self._wake.set()
            if was_down:
                self._emit(Event(type=EventType.ZK_RECONNECTED))
            return
        self.fresh.clear()
        if self.connected:
            self.connected = False
            self._emit(Event(type=EventType.ZK_DISCONNECTED, detail={"state": str(state)}))
        if state == KazooState.LOST:
            log.warning("zk_session_lost", hosts=self.settings.hosts)

    def _on_watch(self, event: WatchedEvent) -> None:
        if event.type == ZkEventType.NONE:  # session reset: every watch is gone
            self._full = True
        elif event.path and event.path.startswith(self._prefix):
            name = event.path[len(self._prefix) :]
            self._dirty.add(name)
            if event.type == ZkEventType.CHANGED:
                self._times.changed(name)
            elif event.type == ZkEventType.DELETED:
                self._times.gone(name)
        self._wake.set()

    # -- the reconcile task -----------------------------------------------------------

    async def _run(self) -> None:
        next_full = time.monotonic() + self.settings.resync_interval
        while True:
            try:
                async with asyncio.timeout(max(0.0, next_full - time.monotonic())):
                    await self._wake.wait()
            except TimeoutError:
                self._full = True
            if self._full:
                next_full = time.monotonic() + self.settings.resync_interval
            self._wake.clear()
            if self.connected:
                await self._reconcile_once()

    async def _reconcile_once(self) -> None:
        try:
            await self._reconcile()
        except NoNodeError:
            await self._ensure_root()
        except KazooException as exc:  # connection loss: CONNECTED will wake us
            log.info("zk_listing_interrupted", error=repr(exc))
            self._full = True
        except Exception:
            log.exception("reconcile_failed")
            self._full = True
            await asyncio.sleep(0.5)
            self._wake.set()

    async def _ensure_root(self) -> None:
        """Re-create a missing root so engines can register and the watch can be armed.

        With the cluster's ACL (``netdisco.cluster.acl``): never open to the world
        when a digest is configured.
        """
        try:
            await ensure_roots(self.client, self.settings.root, cluster_acl(self._credentials))
            log.warning("zk_root_created", root=self.settings.root)
        except NoAuthError:
            log.warning("zk_root_missing_no_permission", root=self.settings.root)
            await wait_result(self.client.exists_async(self.settings.root, watch=self._watch))
            return
        self._full = True
        self._wake.set()

    async def _reconcile(self) -> None:
        full, self._full = self._full, False
        dirty, self._dirty = self._dirty, set()
        self._times.listing_sent = time.monotonic()
        listing = self.client.get_children_async(
            self.settings.root, watch=self._watch, include_data=True
        )
        # Reads of notified children go out right behind the listing (ZooKeeper
        # answers a session in order, so they see at least the listed state): one
        # round trip instead of two for a leave.
        early = {} if full else {name: self._send_read(name) for name in dirty}
        children, stat = await wait_result(listing)
        await self._handed_over()
        listed_at = time.monotonic()  # every notification up to the listing is in by now
        # Marks that came in meanwhile may be about changes after an early read was
        # answered (whose watch they consumed): those names are read afresh.
        late, self._dirty = self._dirty, set()
        dirty |= late
        prev = self.view or View()
        parent = Parent(czxid=stat.czxid, cversion=stat.cversion, pzxid=stat.pzxid)
        reads = await self._read_all(
            {
                n: None if n in late else early.get(n)
                for n in children
                if full or n in dirty or n not in prev.members
            }
        )
        view, retry = assemble(prev, children, reads, parent, time.time())
        if retry:  # changed after the listing: look again at once
            self._dirty |= retry
            self._wake.set()
        left = await self._left(prev, view, listed_at)
        self._apply(prev, view, left, listed_at, baseline=self.view is None)
        if self.connected:
            self.fresh.set()
        if full:
            await self._housekeep()

    async def _handed_over(self) -> None:
        """Wait until every watch event kazoo received before now has reached the loop.

        kazoo hands replies and watch events over on two different threads, so
        under load a notification can trail the reply that ZooKeeper sent after
        it (by hundreds of ms, measured). A marker queued behind the events on
        kazoo's callback thread restores ZooKeeper's order: once it arrives, the
        dirty marks and write times of every change up to the listing are here.
        """
        loop = asyncio.get_running_loop()
        arrived: asyncio.Future[None] = loop.create_future()

        def settle() -> None:
            if not arrived.done():
                arrived.set_result(None)

        self.client.handler.dispatch_callback(
            Callback("watch", loop.call_soon_threadsafe, (settle,))
        )
        await arrived

    def _send_read(self, name: str) -> Any:
        return self.client.get_async(self._prefix + name, watch=self._watch)

    async def _read_all(self, wanted: Mapping[str, Any]) -> dict[str, Member | None]:
        """Read each name; a value is a read already sent (or None: send it now)."""
        names = list(wanted)
        results = await asyncio.gather(*(self._read(n, wanted[n]) for n in names))
        return dict(zip(names, results, strict=True))

    async def _read(self, name: str, sent: Any = None) -> Member | None:
        try:
            raw, stat = await wait_result(sent if sent is not None else self._send_read(name))
        except NoNodeError:
            self._times.gone(name, first=True)
            return None
        member = member_of(name, raw, stat)
        if member.garbage and self._garbage_seen.get(name) != stat.czxid:
            self._garbage_seen[name] = stat.czxid
            size = len(raw or b"")
            log.warning("engine_data_garbage", engine_id=name, size=size)
            if size > MAX_NODE_DATA and self._on_dropped is not None:
                self._on_dropped("znode")
        return member

    async def _left(self, prev: View, view: View, listed_at: float) -> set[tuple[str, int]]:
        """The gone nodes that left gracefully: those whose tombstone exists.

        Read after the listing that lacks them, so exact (``netdisco.cluster.tombstones``).
        Engines of contract 1 leave no tombstone: for them the old timing rule.
        """
        members = gone(prev, view)
        legacy = [m for m in members if not m.payload.tombstones and not m.garbage]
        if legacy and not self._legacy_logged:
            self._legacy_logged = True
            log.warning("engines_without_tombstones", engine_id=legacy[0].name,
                        rule="a 'leaving' write seen just before the deletion")  # fmt: skip
        departing = self._times.departing(prev, view, listed_at)
        members = await self._trusted(members)
        self._say_unproven(members)
        key = self.proof_key
        return await who_left(self.client, self.settings.root, members, departing, key)

    def _say_unproven(self, members: list[Member]) -> None:
        """Once: engines of an older contract prove nothing, so their leaves read as lost."""
        old = [m for m in members if (m.payload.contract or 0) < PROOF_CONTRACT]
        if self.proof_key is not None and old and not self._unproven_logged:
            self._unproven_logged = True
            log.warning("engines_unproven", engine_id=old[0].name,
                        meaning="an engine older than contract 3 proves no leave: "
                        "its leaves are reported as engine_lost")  # fmt: skip

    def proven(self, member: Member) -> bool:
        """Whether ``member``'s node was written by a cluster member (always, with no key)."""
        if self.proof_key is None:
            return True
        payload = member.payload
        return proves_engine(
            self.proof_key, payload.proof, member.name, payload.status_url, member.session
        )

    async def _trusted(self, members: list[Member]) -> list[Member]:
        """With a digest, tombstones under an open (or missing) root prove no leave."""
        if self._credentials is None or not any(m.payload.tombstones for m in members):
            return members
        why = await tombstones_trusted(self.client, self.settings.root)
        if why is None:
            return members
        log.warning("tombstones_untrusted", reason=why, engines=[m.name for m in members],
                    meaning="reported as engine_lost")  # fmt: skip
        return [m for m in members if not m.payload.tombstones]

    async def _housekeep(self) -> None:
        """On each full resync: tombstones past their age go; an open root is reported."""
        if self._credentials is not None:
            root = self.settings.root
            warnings = await root_warnings(self.client, root, self._credentials)
            for warning in warnings:
                if warning not in self.warnings:
                    log.warning("zk_root_acl_wrong", detail=warning)
            self.warnings = warnings
        if self._sweep_denied:
            return
        try:
            if deleted := await self.sweeper.sweep(self.client):
                log.info("tombstones_deleted", count=deleted)
        except NoAuthError:
            self._sweep_denied = True
            log.warning("tombstones_not_deletable", hint="give the monitor the engines' digest")

    def _apply(
        self,
        prev: View,
        view: View,
        left: set[tuple[str, int]],
        listed_at: float,
        *,
        baseline: bool,
    ) -> None:
        self.view = view
        last_seen, self._listed_wall = self._listed_wall, time.time()
        if self._garbage_seen.keys() - view.members.keys():
            self._garbage_seen = {k: v for k, v in self._garbage_seen.items() if k in view.members}
        if baseline:
            log.info("baseline", engines=len(view.members), root=self.settings.root)
            self._schedule_save()
            return
        result = diff(prev, view, left, partial(leave_proven, self.proof_key))
        for change in result.changes:
            self._emit(_to_event(change, last_seen=last_seen))
        if result.unobserved:
            self.unobserved_total += result.unobserved
            log.warning("changes_unobserved", count=result.unobserved)
            if self._on_unobserved is not None:
                self._on_unobserved(result.unobserved)
        self._times.forget(prev, view, listed_at)
        if result.changes or result.unobserved:
            self._schedule_save()

    def _emit(self, event: Event) -> None:
        try:
            self._on_event(event)
        except Exception:  # a consumer bug must not stop the watcher
            log.exception("event_consumer_failed", event=event.type.value)

    # -- persistence ------------------------------------------------------------------

    def _schedule_save(self) -> None:
        if self._state_file is None or (self._save_task and not self._save_task.done()):
            return
        self._save_task = asyncio.create_task(self._save_soon())

    async def _save_soon(self) -> None:
        await asyncio.sleep(1.0)  # coalesce bursts of changes into one write
        view, path = self.view, self._state_file
        if view is not None and path is not None:
            await asyncio.to_thread(
                statefile.save, path, view, hosts=self.settings.hosts, root=self.settings.root
            )

    def _save_now(self) -> None:
        if self.view is not None and self._state_file is not None:
            statefile.save(
                self._state_file, self.view, hosts=self.settings.hosts, root=self.settings.root
            )


def _to_event(change: Change, last_seen: float) -> Event:
    """``last_seen``: when the listing before this one, the last to show the engine, was made."""
    member = change.member
    # the node's czxid says which incarnation; an update, also which write (mzxid)
    which = (member.mzxid,) if change.type is EventType.ENGINE_UPDATED else ()
    identity = same(change.type.value, change.name, member.czxid, *which)
    if change.type is EventType.CLUSTER_EMPTY:
        return Event(type=change.type, engine=member.describe(), identity=identity)
    removed = change.type in (EventType.ENGINE_LEFT, EventType.ENGINE_LOST)
    detail: dict[str, Any] = {"last_seen": last_seen} if removed and last_seen else {}
    if change.type is EventType.ENGINE_LOST and change.member.leaving:
        detail["reason"] = (
            "it said it was leaving, but no tombstone proves the leave (a forged or missing "
            "tombstone, or a tombstone root another client re-created)"
        )
    if change.type is EventType.ENGINE_RESTARTED:
        detail["previous_left"] = change.left  # the old node left (tombstone), or was lost
    return Event(
        type=change.type,
        engine_id=change.name,
        engine=change.member.describe(),
        previous=change.previous.describe() if change.previous else None,
        detail=detail,
        identity=identity,
    )
