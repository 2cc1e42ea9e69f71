"""The outbox: every alert is recorded in ZooKeeper before it is sent and marked after.

An entry is a persistent node ``<root>.outbox/<hook>.<kind>.<key>``, where ``key`` is
the event's identity (:attr:`monitor.events.Event.key`), which every monitor computes
alike. Every monitor that sees an event creates its entries; the second create fails
with ``NodeExists``, and that is the whole of the deduplication. The monitor that leads
(:mod:`monitor.leader`) reads the entries that are ``pending``, claims each with a
compare-and-set (``sending``, by its instance) and hands it to its hooks; after the
delivery it marks it ``sent`` (or ``dropped``, failing past ``max_age``), again with a
compare-and-set. A claim held by a monitor that is no longer in the latch is taken
over: that alert is delivered again and counted (``alerts_taken_over``), because its
first monitor may have sent it before it died. A claimant that finds its entry marked
by another counts a duplicate (``alerts_duplicate``).

Entries that are done stay ``retention`` seconds (the tombstones' age: a monitor that
comes back with its state file reports what happened while it was away, and must find
those already there), at most :data:`MAX_ENTRIES`; the leader deletes the rest.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import structlog
from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, KazooException, NodeExistsError, NoNodeError
from kazoo.protocol.states import WatchedEvent

from monitor.events import Event, EventType
from monitor.leader import Latch
from monitor.metrics import Metrics
from netdisco._tasks import wait_event
from netdisco.cluster.zk import Bridge, wait_result

log = structlog.get_logger(__name__)

#: entries kept at most (the oldest done ones go first); one entry's data at most
MAX_ENTRIES = 5000
MAX_DATA = 64 * 1024
#: entries read at once by a leader that takes over
READS = 100
#: seconds between two passes of the leader when no entry wakes it
PASS = 5.0
PENDING, SENDING, SENT, DROPPED = "pending", "sending", "sent", "dropped"


def outbox_root(root: str) -> str:
    """Where the outbox lives, beside the engines' root."""
    return f"{root.rstrip('/') or ''}.outbox"


def neighbour(identity: tuple[str, ...]) -> tuple[str, ...] | None:
    """A lasting rule's episode is the bucket it tripped in (``~N``); a monitor whose
    trip fell in the next bucket finds it there (:func:`monitor.daemon.episode`)."""
    last = identity[-1] if identity else ""
    if last.startswith("~") and last[1:].isdigit():
        return (*identity[:-1], f"~{int(last[1:]) - 1}")
    return None


def entry_name(hook: str, event: Event) -> str:
    return f"{hook}.{event.type.value}.{event.key}"


@dataclass
class Entry:
    """One entry as last read or written here: its name, version and state."""

    name: str
    version: int
    state: str
    by: str | None = None
    at: float = 0.0  # when it was last written
    created: int = 0  # its czxid: entries are sent in the order they were recorded
    identity: tuple[str, ...] = ()

    @property
    def hook(self) -> str:
        return self.name.split(".", 1)[0]


class Outbox:
    """The entries in ZooKeeper: create, claim, mark, release (module docstring)."""

    def __init__(
        self, client: KazooClient, root: str, acl: Any, latch: Latch, metrics: Metrics
    ) -> None:
        self.client = client
        self.path = outbox_root(root)
        self.acl = acl
        self.latch = latch
        self.metrics = metrics
        self._mine: dict[str, None] = {}  # the entries this monitor created, oldest first

    def _node(self, name: str) -> str:
        return f"{self.path}/{name}"

    async def put(self, hook: str, event: Event) -> bool:
        """Record the alert of ``event`` for ``hook``; False when a monitor already did."""
        assert event.identity is not None
        earlier = neighbour(event.identity)
        if earlier is not None and await self._tripped_before(hook, event, earlier):
            return False
        if earlier is not None:
            event = self._next_episode(hook, event)
        raw = _fit(self._body(PENDING, event))
        name = entry_name(hook, event)
        try:
            await wait_result(
                self.client.create_async(self._node(name), raw, acl=self.acl, makepath=True)
            )
        except NodeExistsError:
            return False
        self._mine[name] = None
        while len(self._mine) > MAX_ENTRIES:
            del self._mine[next(iter(self._mine))]
        return True

    async def _tripped_before(self, hook: str, event: Event, earlier: tuple[str, ...]) -> bool:
        """Whether another monitor recorded this episode in the bucket before this one's."""
        if entry_name(hook, event) in self._mine:
            return False  # this monitor's next episode in the bucket: not the one before
        twin = entry_name(hook, replace(event, identity=earlier))
        if twin in self._mine:  # this monitor's own earlier episode
            return False
        return await wait_result(self.client.exists_async(self._node(twin))) is not None

    def _next_episode(self, hook: str, event: Event) -> Event:
        """A lasting condition this monitor reported in this bucket already, then cleared
        and tripped again (a loop that stalls twice): its next episode, ``~N.1``, ``~N.2``...,
        numbered alike by another monitor that saw both trips."""
        assert event.identity is not None
        base, n = event.identity, 0
        while entry_name(hook, event) in self._mine:
            n += 1
            event = replace(event, identity=(*base[:-1], f"{base[-1]}.{n}"))
        return event

    def _body(self, state: str, event: Event) -> dict[str, Any]:
        return {"state": state, "at": time.time(), "by": self.latch.instance,
                "identity": list(event.identity or ()), "event": event.to_json()}  # fmt: skip

    async def read(self, name: str) -> tuple[Entry, Event | None] | None:
        """An entry and the event it holds (None for one done); None when it is gone."""
        try:
            raw, stat = await wait_result(self.client.get_async(self._node(name)))
        except NoNodeError:
            return None
        data = _loads(raw)
        state = data.get("state")
        entry = Entry(
            name,
            stat.version,
            state if state in (PENDING, SENDING, SENT, DROPPED) else DROPPED,
            by=data.get("by") if isinstance(data.get("by"), str) else None,
            at=stat.mtime / 1000,
            created=stat.czxid,
            identity=_identity(data.get("identity")),
        )
        return entry, (_event(data) if entry.state in (PENDING, SENDING) else None)

    async def claim(self, entry: Entry, event: Event) -> bool:
        """Mark ``entry`` being sent by this monitor; False when another got there first."""
        data = self._body(SENDING, event)
        try:
            stat = await self._write(entry, data)
        except (BadVersionError, NoNodeError):
            return False
        entry.version, entry.state, entry.by = stat.version, SENDING, self.latch.instance
        return True

    async def finish(self, entry: Entry, state: str) -> None:
        """Mark a claimed entry ``sent`` or ``dropped`` (the event's identity stays, its data
        goes); count a duplicate when another monitor took it over and marked it meanwhile."""
        data = {"state": state, "at": time.time(), "by": self.latch.instance,
                "identity": list(entry.identity)}  # fmt: skip
        try:
            stat = await self._write(entry, data)
            entry.version, entry.state, entry.at = stat.version, state, time.time()
        except (BadVersionError, NoNodeError):
            found = await self.read(entry.name)
            if state == SENT and found is not None and found[0].state == SENT:
                self.metrics.alerts_duplicate.labels(entry.hook).inc()
                log.warning("alert_duplicate", entry=entry.name, also_sent_by=found[0].by)

    async def release(self, entry: Entry) -> None:
        """Give a claimed entry back (this monitor stops before it could send it)."""
        current = await self.read(entry.name)
        if current is None or current[1] is None or current[0].version != entry.version:
            return
        data = {**self._body(PENDING, current[1]), "by": None}
        with contextlib.suppress(BadVersionError, NoNodeError):
            await self._write(entry, data)

    async def _write(self, entry: Entry, data: dict[str, Any]) -> Any:
        """Set an entry's data if it is still the version read or written here."""
        raw = _fit(data)
        return await wait_result(
            self.client.set_async(self._node(entry.name), raw, version=entry.version)
        )

    async def delete(self, entry: Entry) -> None:
        with contextlib.suppress(BadVersionError, NoNodeError):
            await wait_result(self.client.delete_async(self._node(entry.name), entry.version))


class Courier:
    """The leader's loop: claim the pending entries, hand them to the hooks, trim the done.

    ``hand(hook, event, entry)`` queues a claimed alert with that hook (batching, storm
    folding and retries are :class:`monitor.alerts.Alerts`'s).
    """

    def __init__(
        self,
        outbox: Outbox,
        latch: Latch,
        hand: Callable[[str, Event, Entry], None],
        retention: float,
    ) -> None:
        self.outbox = outbox
        self.latch = latch
        self.hand = hand
        self.retention = retention
        self.known: dict[str, Entry] = {}  # what this leader read, claimed or marked
        self.wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._watch: Callable[[WatchedEvent], None] | None = None

    def start(self) -> None:
        bridge = Bridge(self.outbox.client, asyncio.get_running_loop())
        self._watch = bridge.watcher(lambda _event: self.wake.set())  # a new entry
        self._task = asyncio.create_task(self._run(), name="monitor-courier")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def changed(self) -> None:
        """Who leads may have changed: a new leader reads every entry afresh."""
        if not self.latch.leading:
            self.known.clear()
        self.wake.set()

    async def _run(self) -> None:
        while True:
            self.wake.clear()
            if self.latch.leading:
                try:
                    await self._pass()
                except KazooException as exc:
                    log.info("outbox_pass_interrupted", error=repr(exc))
            await wait_event(self.wake, PASS)

    async def _pass(self) -> None:
        try:
            names = set(await wait_result(self.outbox.client.get_children_async(
                self.outbox.path, watch=self._watch)))  # fmt: skip
        except NoNodeError:  # no alert recorded yet: woken when the first one is
            await wait_result(self.outbox.client.exists_async(self.outbox.path, watch=self._watch))
            return
        for gone in self.known.keys() - names:
            del self.known[gone]
        fresh = [n for n in names if n not in self.known or self._orphaned(self.known[n])]
        reads = []
        for start in range(0, len(fresh), READS):
            chunk = fresh[start : start + READS]
            reads += [r for r in await asyncio.gather(*map(self.outbox.read, chunk)) if r]
        for entry, event in sorted(reads, key=lambda read: read[0].created):  # oldest first
            if self.latch.leading:
                await self._take(entry, event)
        await self._trim()

    def _orphaned(self, entry: Entry) -> bool:
        """Claimed by a monitor that is no longer running."""
        return entry.state == SENDING and entry.by not in self.latch.live()

    async def _take(self, entry: Entry, event: Event | None) -> None:
        self.known[entry.name] = entry
        if event is None or (entry.state == SENDING and not self._orphaned(entry)):
            return  # done, or being sent by a monitor that runs
        taken_over = entry.state == SENDING
        if not await self.outbox.claim(entry, event):
            self.known.pop(entry.name, None)  # changed meanwhile: read it again
            return
        if taken_over:
            self.outbox.metrics.alerts_taken_over.labels(entry.hook).inc()
            log.warning("alert_taken_over", entry=entry.name, key=event.key,
                        meaning="its monitor died while sending it: it may come twice")  # fmt: skip
        self.hand(entry.hook, event, entry)

    async def _trim(self) -> None:
        """Delete done entries past the retention, and the oldest beyond MAX_ENTRIES."""
        done = sorted((e for e in self.known.values() if e.state in (SENT, DROPPED)),
                      key=lambda e: e.at)  # fmt: skip
        over = max(0, len(self.known) - MAX_ENTRIES)
        cutoff = time.time() - self.retention
        doomed = [e for i, e in enumerate(done) if i < over or e.at < cutoff]
        for entry in doomed:
            await self.outbox.delete(entry)
            self.known.pop(entry.name, None)


def _fit(data: dict[str, Any]) -> bytes:
    """An entry's data as JSON within :data:`MAX_DATA`: an event too big loses its
    engine's data, then its previous data and detail (what an alert needs stays)."""
    raw = json.dumps(data, default=str).encode()
    event = data.get("event")
    for key in ("engine", "previous", "detail"):
        if len(raw) <= MAX_DATA or not isinstance(event, dict):
            break
        event[key] = {"id": event.get("engine_id")} if key == "engine" else {}
        raw = json.dumps(data, default=str).encode()
    return raw


def _loads(raw: bytes | None) -> dict[str, Any]:
    try:
        data = json.loads(raw) if raw and len(raw) <= MAX_DATA else None
    except ValueError:
        data = None
    return data if isinstance(data, dict) else {}


def _event(data: dict[str, Any]) -> Event | None:
    """The event an entry holds, checked; None when it is not one."""
    body, identity = data.get("event"), data.get("identity")
    if not isinstance(body, dict) or not isinstance(identity, list) or not identity:
        return None
    try:
        kind = EventType(str(body.get("type")))
    except ValueError:
        return None
    when = body.get("time")
    return Event(
        type=kind,
        engine_id=body["engine_id"] if isinstance(body.get("engine_id"), str) else None,
        engine=body["engine"] if isinstance(body.get("engine"), dict) else {},
        previous=body["previous"] if isinstance(body.get("previous"), dict) else None,
        detail=body["detail"] if isinstance(body.get("detail"), dict) else {},
        time=float(when) if isinstance(when, int | float) else time.time(),
        identity=_identity(identity),
    )


def _identity(value: Any) -> tuple[str, ...]:
    """An identity as an entry holds it: a short list of short strings."""
    return tuple(str(part)[:300] for part in value[:16]) if isinstance(value, list) else ()
