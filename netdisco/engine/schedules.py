"""Scheduled spiders: a cron expression or an interval, and the task that keeps time.

A schedule is ``schedule = "0 */6 * * *"`` (cron, evaluated in UTC by croniter; a
sixth field is seconds) or ``every = "30m"`` (``s``, ``m``, ``h``, ``d``; a number is
seconds). Ticks are absolute instants, the same on every engine
(:mod:`netdisco.cluster.ticks`), so engines sharing a crawl agree on which tick is
which (``runs.claim_run``). At a tick the
engine starts a new run of the spider unless the previous one is still going:
then the tick is skipped and counted. A run that fails is counted, and the next
tick runs anyway. Schedules are recomputed from the configuration at every engine
start, so they survive restarts without state of their own.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import structlog

from netdisco.cluster.ticks import Schedule, parse_schedule

#: the tick arithmetic is ``netdisco.cluster.ticks``'s, imported from here by older code
__all__ = ["Schedule", "ScheduledSpider", "Timetable", "parse_schedule"]

log = structlog.get_logger(__name__)


#: starts the run of a tick (Unix seconds; its id on every engine); False when the
#: previous run is still going
StartRun = Callable[[float], Awaitable[bool]]
#: claims a tick cluster-wide (shared frontiers); False when another engine has it
ClaimTick = Callable[[float], Awaitable[bool]]


class ScheduledSpider:
    """Keeps one spider's schedule: waits for each tick, starts a run, counts what happened."""

    def __init__(
        self, name: str, schedule: Schedule, start_run: StartRun, claim: ClaimTick | None = None
    ) -> None:
        self.name = name
        self.schedule = schedule
        self.next_run: float | None = None
        self.runs = 0
        self.skipped = 0  # the previous run was still going
        self.claimed_elsewhere = 0  # another engine ran this tick of a shared crawl
        self.failed = 0  # a run that could not start
        self._start_run = start_run
        self._claim = claim

    def status(self) -> dict[str, Any]:
        """The schedule's part of the spider's status."""
        return {
            **self.schedule.describe(),
            "next_run": self.next_run,
            "runs": self.runs,
            "skipped_runs": self.skipped,
            "runs_elsewhere": self.claimed_elsewhere,
            "failed_runs": self.failed,
        }

    async def keep(self, changed: Callable[[], None]) -> None:
        """Run at every tick until cancelled; ``changed`` is told when ``next_run`` moves."""
        self.next_run = self.schedule.next_run(time.time())
        changed()
        while True:
            await asyncio.sleep(max(0.0, self.next_run - time.time()))
            tick = self.next_run
            await self._tick(tick)
            self.next_run = self.schedule.next_run(max(tick, time.time()))
            changed()

    async def _tick(self, tick: float) -> None:
        try:
            if self._claim is not None and not await self._claim(tick):
                self.claimed_elsewhere += 1
                return
            if await self._start_run(tick):
                self.runs += 1
            else:
                self.skipped += 1
                log.info("scheduled_run_skipped", spider=self.name, reason="previous run going")
        except Exception as exc:  # the next tick must still run
            self.failed += 1
            log.error("scheduled_run_failed", spider=self.name, error=repr(exc))


class Timetable:
    """The engine's scheduled spiders and the tasks that keep their time."""

    def __init__(self) -> None:
        self._spiders: dict[str, ScheduledSpider] = {}
        self._tasks: dict[str, asyncio.Task[None]] = {}

    def __contains__(self, name: object) -> bool:
        return name in self._spiders

    def __bool__(self) -> bool:
        return bool(self._spiders)

    def add(self, scheduled: ScheduledSpider) -> None:
        """Keep ``scheduled`` (its task starts with ``keep``)."""
        self._spiders[scheduled.name] = scheduled

    def keep(
        self, name: str, spawn: Callable[[Any], asyncio.Task[None]], changed: Callable[[], None]
    ) -> None:
        """Start keeping time for ``name`` in a task of the engine's."""
        self._tasks[name] = spawn(self._spiders[name].keep(changed))

    async def stop(self) -> None:
        """Stop keeping time, every tick under way ended (an engine's stop): a tick that
        fired while the spiders were being stopped would start a run no one stops."""
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def remove(self, name: str) -> None:
        """Stop keeping time for ``name`` and forget it."""
        task = self._tasks.pop(name, None)
        if task is not None:
            task.cancel()
        self._spiders.pop(name, None)

    def status(self, name: str) -> dict[str, Any]:
        """The schedule's part of ``name``'s status (nothing for an unscheduled spider)."""
        scheduled = self._spiders.get(name)
        return {} if scheduled is None else scheduled.status()

    def next_run(self, name: str) -> float | None:
        """When ``name`` runs next, if it is scheduled."""
        scheduled = self._spiders.get(name)
        return None if scheduled is None else scheduled.next_run
