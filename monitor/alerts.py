"""From events to hook deliveries: grace period, flaps, batching, retries.

Offline events (``engine_lost`` by default) wait ``grace`` seconds: an engine
back within it is one ``engine_flapped`` event and no alert. No offline alert
goes out while the monitor's own view is stale: the grace timer then also
waits for a fresh listing and looks again. Each delivery is its own task with
a timeout, retried with exponential backoff until it succeeds or passes
``max_age``, when it is logged as dropped and counted: nothing is lost silently,
and a slow hook never holds up the watcher or another hook.

A storm (a partition takes fifty engines at once) is folded: e-mail batches every
event of ``batch_window`` into one message; a webhook, command or callable hook gets
its first ``storm_limit`` events of a window one by one and the rest of that window
as one ``alert_storm`` event (counts by kind, the engines), so a receiver sees a
handful of deliveries, not thousands.

With an outbox (:mod:`monitor.outbox`), an event that has an identity is not sent from
here: after its grace it is recorded there for each hook that takes it, by every monitor
that saw it, and the leading monitor's courier hands each claimed entry back through
:meth:`Alerts.hand`, which batches, folds, sends and marks it. Only the monitor's own
events (its link to ZooKeeper) go straight to the hooks.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter, deque
from collections.abc import Callable, Sequence
from typing import Any

import structlog
from kazoo.exceptions import NoAuthError

from monitor.events import Event, EventType, same
from monitor.hooks import Hook
from monitor.metrics import Metrics
from monitor.outbox import DROPPED, SENT, Entry, Outbox
from monitor.settings import AlertSettings

log = structlog.get_logger(__name__)

_BACK = frozenset({EventType.ENGINE_JOINED, EventType.ENGINE_RESTARTED})
#: The grace key of ``cluster_empty``; ``present(CLUSTER)`` means "any engine online".
CLUSTER = "*"
#: deliveries kept for the dashboard ("alerts sent, with their delivery result")
DELIVERIES = 200
#: engines an ``alert_storm`` event names (the rest are counted)
STORM_ENGINES = 100


class Alerts:
    """Routes events to hooks. ``present(engine_id)`` and ``fresh`` come from the watcher.

    ``cluster_empty`` (an offline event by default too) waits the same grace,
    so one engine's flap cannot e-mail "cluster empty" either.
    """

    def __init__(
        self,
        hooks: Sequence[Hook],
        settings: AlertSettings,
        metrics: Metrics,
        *,
        fresh: asyncio.Event,
        present: Callable[[str], bool],
        record: Callable[[Event], None],
        outbox: Outbox | None = None,
    ) -> None:
        self.hooks = list(hooks)
        self.settings = settings
        self.metrics = metrics
        self._fresh = fresh
        self._present = present
        self._record = record  # where engine_flapped events go (then back to submit)
        self.outbox = outbox
        self._claims: dict[asyncio.Task[Any], list[Entry]] = {}  # deliveries of entries
        self._puts: set[asyncio.Task[None]] = set()
        self._grace: dict[str, tuple[Event, asyncio.Task[None]]] = {}
        self._pending: dict[str, list[tuple[Event, Entry | None]]] = {}  # hook -> its batch
        self._timers: dict[str, asyncio.Task[None]] = {}
        self._windows: dict[str, tuple[float, int]] = {}  # hook -> (window start, sent in it)
        self._deliveries: dict[asyncio.Task[None], tuple[str, list[str]]] = {}
        self._backoff: dict[asyncio.Task[Any], tuple[str, list[str]]] = {}  # waiting to retry
        self._closing = False
        #: the last deliveries, newest last: hook, event seqs and kinds, result, attempts
        self.deliveries: deque[dict[str, Any]] = deque(maxlen=DELIVERIES)

    def submit(self, event: Event) -> None:
        """Take one event; never blocks, never raises for a hook's sake."""
        if event.type in _BACK:
            self._back(event)
        if event.type in self.settings.offline_events and self.settings.grace > 0:
            key = event.engine_id or CLUSTER
            if key not in self._grace:  # else: the same absence, already waited on
                self._grace[key] = (event, asyncio.create_task(self._after_grace(key, event)))
            return
        self._route(event)

    def _back(self, event: Event) -> None:
        """An engine (re)appeared: cancel the offline alerts it makes untrue."""
        if CLUSTER in self._grace:
            self._grace.pop(CLUSTER)[1].cancel()
            log.info("offline_alert_cancelled", key=CLUSTER, reason="an engine joined")
        if event.engine_id in self._grace:
            lost, task = self._grace.pop(event.engine_id)
            task.cancel()
            self._flapped(lost, event)

    def _flapped(self, lost: Event, back: Event) -> None:
        back_as = back.identity[1:] if back.identity else None  # the engine, its new czxid
        self._record(
            Event(
                type=EventType.ENGINE_FLAPPED,
                engine_id=back.engine_id,
                engine=back.engine,
                previous=lost.engine,
                detail={"lost": lost.type.value, "back_after": round(back.time - lost.time, 3)},
                identity=None if back_as is None else same("engine_flapped", *back_as),
            )
        )

    async def _after_grace(self, key: str, event: Event) -> None:
        await asyncio.sleep(self.settings.grace)
        await self._fresh.wait()  # no offline alert from a stale view
        self._grace.pop(key, None)
        if self._present(key):  # back, though no join was seen (e.g. while stale)
            log.info("offline_alert_cancelled", key=key, reason="back after the grace period")
            return
        self._route(event)

    def _route(self, event: Event) -> None:
        for hook in self.hooks:
            if event.type not in hook.events:
                continue
            if self.outbox is not None and event.identity is not None:
                task = asyncio.create_task(self._put(hook.name, event))
                self._puts.add(task)
                task.add_done_callback(self._puts.discard)
            else:
                self._queue(hook, event, None)

    async def _put(self, hook: str, event: Event) -> None:
        """Record the alert in the outbox, retried while ZooKeeper is away (up to max_age)."""
        assert self.outbox is not None
        born, delay = time.monotonic(), self.settings.retry_initial
        while True:
            try:
                created = await self.outbox.put(hook, event)
                said = "alert_recorded" if created else "alert_recorded_already"
                log.info(said, hook=hook, kind=event.type.value, engine_id=event.engine_id,
                         key=event.key)  # fmt: skip
                return
            except NoAuthError:  # the outbox's parent is not ours to write: send from here
                log.warning("alert_outbox_denied", hook=hook, path=self.outbox.path,
                            meaning="every monitor sends this alert itself")  # fmt: skip
                self._queue(next(h for h in self.hooks if h.name == hook), event, None)
                return
            except Exception as exc:
                if self._closing or time.monotonic() - born > self.settings.max_age:
                    self._dropped(hook, [event.type.value], f"not recorded: {exc!r}")
                    return
                await asyncio.sleep(delay)
                delay = min(delay * 2, self.settings.retry_max)

    def hand(self, hook_name: str, event: Event, entry: Entry) -> None:
        """A claimed outbox entry, to be sent by ``hook_name`` (the courier calls it)."""
        hook = next((h for h in self.hooks if h.name == hook_name), None)
        if hook is None:  # a hook another monitor has and this one has not
            log.warning("alert_hook_unknown", hook=hook_name, entry=entry.name)
            task = asyncio.create_task(self._mark([entry], DROPPED))
            self._puts.add(task)
            task.add_done_callback(self._puts.discard)
            return
        self._queue(hook, event, entry)

    def _queue(self, hook: Hook, event: Event, entry: Entry | None) -> None:
        if self.settings.batch_window > 0 and (hook.batch or self._storming(hook.name)):
            self._pending.setdefault(hook.name, []).append((event, entry))
            if hook.name not in self._timers:
                self._timers[hook.name] = asyncio.create_task(self._flush_later(hook))
        else:
            self._spawn(hook, [event], [entry] if entry is not None else [])

    def _storming(self, name: str) -> bool:
        """Whether hook ``name`` had its ``storm_limit`` single deliveries in this
        window already: the rest of the window is folded into one event."""
        limit = self.settings.storm_limit
        if not limit:
            return False
        now = time.monotonic()
        start, count = self._windows.get(name, (now, 0))
        if now - start >= self.settings.batch_window:
            start, count = now, 0
        self._windows[name] = (start, count + 1)
        return count >= limit

    async def _flush_later(self, hook: Hook) -> None:
        await asyncio.sleep(self.settings.batch_window)
        self._flush(hook)

    def _flush(self, hook: Hook) -> None:
        self._timers.pop(hook.name, None)
        batch = self._pending.pop(hook.name, [])
        events = [event for event, _ in batch]
        if events and not hook.batch:
            self._windows.pop(hook.name, None)  # a fresh window after the fold
            events = [storm(events, self.settings.batch_window)]
            log.warning("alert_storm", hook=hook.name, **events[0].detail)
        if events:
            self._spawn(hook, events, [entry for _, entry in batch if entry is not None])

    def _spawn(self, hook: Hook, events: list[Event], entries: list[Entry]) -> None:
        task = asyncio.create_task(self._deliver(hook, events, entries))
        self._deliveries[task] = (
            hook.name,
            [f"{e.type.value}:{e.engine_id or '-'}" for e in events],
        )
        if entries:
            self._claims[task] = entries
        task.add_done_callback(lambda done: self._deliveries.pop(done, None))

    async def _mark(self, entries: list[Entry], state: str) -> None:
        """Mark delivered (or given up) the outbox entries a delivery stood for."""
        if self.outbox is None or not entries:
            return
        try:
            await asyncio.gather(*(self.outbox.finish(e, state) for e in entries))
        except Exception as exc:  # ZooKeeper away: a new leader takes them over, again
            log.warning("alert_mark_failed", entries=[e.name for e in entries], error=repr(exc))

    async def _deliver(self, hook: Hook, events: list[Event], entries: list[Entry]) -> None:
        born, delay, attempt = time.monotonic(), self.settings.retry_initial, 0
        kinds = [f"{e.type.value}:{e.engine_id or '-'}" for e in events]
        task = asyncio.current_task()
        assert task is not None
        while True:
            attempt += 1
            try:
                async with asyncio.timeout(self.settings.hook_timeout):
                    await hook.deliver(events)
            except Exception as exc:
                self.metrics.alerts_failed.labels(hook.name).inc()
                if self._closing or time.monotonic() - born + delay > self.settings.max_age:
                    why = (
                        "monitor stopping"
                        if self._closing
                        else f"failing for {self.settings.max_age} s"
                    )
                    self._dropped(hook.name, kinds, f"{why}: {exc!r}")
                    self._note(hook.name, events, "dropped", attempt, repr(exc))
                    if not self._closing:  # a monitor that stops gives its claims back
                        await self._mark(entries, DROPPED)
                        self._claims.pop(task, None)
                    return
                log.warning("alert_failed", hook=hook.name, events=kinds, attempt=attempt,
                            error=repr(exc), retry_in=delay)  # fmt: skip
                self._backoff[task] = (hook.name, kinds)
                try:
                    await asyncio.sleep(delay)
                finally:
                    self._backoff.pop(task, None)
                delay = min(delay * 2, self.settings.retry_max)
                continue
            self.metrics.alerts_sent.labels(hook.name).inc()
            log.info("alert_sent", hook=hook.name, events=kinds, attempt=attempt,
                     keys=[e.key for e in events], entries=[e.name for e in entries])  # fmt: skip
            self._note(hook.name, events, "sent", attempt, None)
            await self._mark(entries, SENT)
            self._claims.pop(task, None)
            return

    def _note(
        self, hook: str, events: list[Event], result: str, attempts: int, error: str | None
    ) -> None:
        self.deliveries.append({
            "hook": hook, "result": result, "attempts": attempts, "error": error,
            "time": time.time(), "seqs": [e.seq for e in events],
            "keys": [e.key for e in events if e.key is not None],
            "events": [f"{e.type.value}:{e.engine_id or '-'}" for e in events],
        })  # fmt: skip

    def view(self) -> dict[str, Any]:
        """What the dashboard's Alerts page shows: each hook and the events it takes,
        the alerts waiting out their grace, those being sent or waiting to retry, and the
        last deliveries (newest last)."""
        now = time.time()
        waiting = [
            {"key": key, "event": e.type.value, "engine_id": e.engine_id, "since": e.time,
             "until": e.time + self.settings.grace}
            for key, (e, _) in self._grace.items()
        ]  # fmt: skip
        sending = [
            {"hook": h, "events": k, "retrying": retrying}
            for retrying, tasks in ((False, self._deliveries), (True, self._backoff))
            for h, k in tasks.values()
        ]
        return {
            "now": now,
            "grace": self.settings.grace,
            "hooks": [
                {"name": h.name, "events": sorted(t.value for t in h.events)} for h in self.hooks
            ],
            "waiting": waiting,
            "sending": sending,
            "deliveries": list(self.deliveries),
        }

    def waiting(self, engine_id: str) -> bool:
        """Whether an offline alert about ``engine_id`` is waiting out its grace period."""
        return engine_id in self._grace

    def _dropped(self, hook: str, kinds: list[str], reason: str) -> None:
        self.metrics.alerts_dropped.labels(hook).inc()
        log.error("alert_dropped", hook=hook, events=kinds, reason=reason)

    async def close(self, timeout: float = 5.0) -> None:
        """Send what is batched, give attempts in flight ``timeout`` s; drop (and log) the rest.

        Alerts waiting to retry have failed already: they are dropped at once.
        """
        self._closing = True
        for key, (event, task) in list(self._grace.items()):
            task.cancel()
            log.warning("offline_alert_abandoned", key=key, kind=event.type.value,
                        reason="monitor stopping within the grace period")  # fmt: skip
        self._grace.clear()
        for hook in self.hooks:
            if hook.name in self._timers:
                self._timers[hook.name].cancel()
                self._flush(hook)
        await asyncio.sleep(0)  # let fresh deliveries start their first attempt
        for task, (hook_name, kinds) in list(self._backoff.items()):
            task.cancel()
            self._dropped(hook_name, kinds, "monitor stopping while waiting to retry")
        if self._deliveries:
            _, pending = await asyncio.wait(set(self._deliveries), timeout=timeout)
            for task in pending:
                hook_name, kinds = self._deliveries[task]
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
                self._dropped(hook_name, kinds, "monitor stopping during delivery")
        await self._release()
        for hook in self.hooks:
            await hook.aclose()

    async def _release(self) -> None:
        """Stopping: the outbox entries this monitor claimed and did not send go back to
        pending, for the next leader (alerts not yet recorded are other monitors' to record,
        or are dropped: they are logged)."""
        for task in list(self._puts):
            task.cancel()
        claimed = [entry for entries in self._claims.values() for entry in entries]
        self._claims.clear()
        if self.outbox is None or not claimed:
            return
        with contextlib.suppress(Exception):
            async with asyncio.timeout(2.0):
                await asyncio.gather(*(self.outbox.release(e) for e in claimed))
        log.info("alerts_released", entries=[e.name for e in claimed])


def storm(events: list[Event], window: float) -> Event:
    """One ``alert_storm`` event standing for ``events``: how many of each kind, which
    engines (the first :data:`STORM_ENGINES`), the first and last sequence numbers."""
    engines = sorted({e.engine_id for e in events if e.engine_id})
    return Event(
        type=EventType.ALERT_STORM,
        detail={
            "events": len(events),
            "by_type": dict(Counter(e.type.value for e in events)),
            "engines": engines[:STORM_ENGINES],
            "more_engines": max(0, len(engines) - STORM_ENGINES),
            "seqs": [events[0].seq, events[-1].seq],
            "window": window,
        },
    )
