"""From events to hook deliveries: grace period, flaps, batching, retries.

Offline events (``engine_lost`` by default) wait ``grace`` seconds: an engine
back within it is one ``engine_flapped`` event and no alert. No offline alert
goes out while the monitor's own view is stale: the grace timer then also
waits for a fresh listing and looks again. Each delivery is its own task with
a timeout, retried with exponential backoff until it succeeds or passes
``max_age``, when it is logged as dropped and counted: nothing is lost silently,
and a slow hook never holds up the watcher or another hook.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Sequence

import structlog

from monitor.events import Event, EventType
from monitor.hooks import Hook
from monitor.metrics import Metrics
from monitor.settings import AlertSettings

log = structlog.get_logger(__name__)

_BACK = frozenset({EventType.ENGINE_JOINED, EventType.ENGINE_RESTARTED})


class Alerts:
    """Routes events to hooks. ``present(engine_id)`` and ``fresh`` come from the watcher."""

    def __init__(
        self,
        hooks: Sequence[Hook],
        settings: AlertSettings,
        metrics: Metrics,
        *,
        fresh: asyncio.Event,
        present: Callable[[str], bool],
        record: Callable[[Event], None],
    ) -> None:
        self.hooks = list(hooks)
        self.settings = settings
        self.metrics = metrics
        self._fresh = fresh
        self._present = present
        self._record = record  # where engine_flapped events go (then back to submit)
        self._grace: dict[str, tuple[Event, asyncio.Task[None]]] = {}
        self._pending: dict[str, list[Event]] = {}  # hook name -> batch being collected
        self._timers: dict[str, asyncio.Task[None]] = {}
        self._deliveries: set[asyncio.Task[None]] = set()

    def submit(self, event: Event) -> None:
        """Take one event; never blocks, never raises for a hook's sake."""
        engine_id = event.engine_id
        if engine_id is not None and event.type in _BACK and engine_id in self._grace:
            lost, task = self._grace.pop(engine_id)
            task.cancel()
            self._flapped(lost, event)
        if engine_id is not None and event.type in self.settings.offline_events:
            if engine_id in self._grace:
                return  # the same absence, already waited on
            if self.settings.grace > 0:
                task = asyncio.create_task(self._after_grace(event))
                self._grace[engine_id] = (event, task)
                return
        self._route(event)

    def _flapped(self, lost: Event, back: Event) -> None:
        self._record(
            Event(
                type=EventType.ENGINE_FLAPPED,
                engine_id=back.engine_id,
                engine=back.engine,
                previous=lost.engine,
                detail={"lost": lost.type.value, "back_after": round(back.time - lost.time, 3)},
            )
        )

    async def _after_grace(self, event: Event) -> None:
        await asyncio.sleep(self.settings.grace)
        await self._fresh.wait()  # no offline alert from a stale view
        engine_id = event.engine_id or ""
        self._grace.pop(engine_id, None)
        if self._present(engine_id):  # back, though no join was seen (e.g. state file)
            log.info("offline_alert_cancelled", engine_id=engine_id, reason="engine is back")
            return
        self._route(event)

    def _route(self, event: Event) -> None:
        for hook in self.hooks:
            if event.type not in hook.events:
                continue
            if hook.batch and self.settings.batch_window > 0:
                self._pending.setdefault(hook.name, []).append(event)
                if hook.name not in self._timers:
                    self._timers[hook.name] = asyncio.create_task(self._flush_later(hook))
            else:
                self._spawn(hook, [event])

    async def _flush_later(self, hook: Hook) -> None:
        await asyncio.sleep(self.settings.batch_window)
        self._flush(hook)

    def _flush(self, hook: Hook) -> None:
        self._timers.pop(hook.name, None)
        events = self._pending.pop(hook.name, [])
        if events:
            self._spawn(hook, events)

    def _spawn(self, hook: Hook, events: list[Event]) -> None:
        task = asyncio.create_task(self._deliver(hook, events))
        self._deliveries.add(task)
        task.add_done_callback(self._deliveries.discard)

    async def _deliver(self, hook: Hook, events: list[Event]) -> None:
        born, delay, attempt = time.monotonic(), self.settings.retry_initial, 0
        kinds = [f"{e.type.value}:{e.engine_id or '-'}" for e in events]
        while True:
            attempt += 1
            try:
                await asyncio.wait_for(hook.deliver(events), self.settings.hook_timeout)
            except Exception as exc:
                self.metrics.alerts_failed.labels(hook.name).inc()
                if time.monotonic() - born + delay > self.settings.max_age:
                    self._dropped(hook, kinds, f"failing for {self.settings.max_age} s: {exc!r}")
                    return
                log.warning("alert_failed", hook=hook.name, events=kinds, attempt=attempt,
                            error=repr(exc), retry_in=delay)  # fmt: skip
                await asyncio.sleep(delay)
                delay = min(delay * 2, self.settings.retry_max)
                continue
            self.metrics.alerts_sent.labels(hook.name).inc()
            log.info("alert_sent", hook=hook.name, events=kinds, attempt=attempt)
            return

    def _dropped(self, hook: Hook, kinds: list[str], reason: str) -> None:
        self.metrics.alerts_dropped.labels(hook.name).inc()
        log.error("alert_dropped", hook=hook.name, events=kinds, reason=reason)

    async def close(self, timeout: float = 5.0) -> None:
        """Send what is batched, give deliveries ``timeout`` s, then log the rest as dropped."""
        for engine_id, (event, task) in list(self._grace.items()):
            task.cancel()
            log.warning("offline_alert_abandoned", engine_id=engine_id, event=event.type.value,
                        reason="monitor stopping within the grace period")  # fmt: skip
        self._grace.clear()
        for hook in self.hooks:
            if hook.name in self._timers:
                self._timers[hook.name].cancel()
                self._flush(hook)
        if self._deliveries:
            _, pending = await asyncio.wait(set(self._deliveries), timeout=timeout)
            for task in pending:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            if pending:
                self.metrics.alerts_dropped.labels("shutdown").inc(len(pending))
                log.error("alert_dropped", count=len(pending), reason="monitor stopping")
        for hook in self.hooks:
            await hook.aclose()
