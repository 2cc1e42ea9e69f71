"""The monitor's schedules of jobs: create, list, enable, delete, and fire their ticks.

Schedules are nodes under ``<root>.schedules`` (:mod:`netdisco.cluster.schedules`).
Every ``[jobs] poll`` seconds each monitor lists them; for each enabled one whose
latest tick is after its ``last_tick`` it decides that tick: when the schedule's
previous job is still pending or running the tick is skipped (and counted), else it
fires, making a new job. The decision is one ZooKeeper transaction at the version
read, so with any number of monitors exactly one decides each tick; that monitor
alone tells it (``schedule_fired`` / ``schedule_skipped``), and the job it made is
then placed like any other (``monitor.jobs``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import structlog
from kazoo.exceptions import KazooException

from monitor.events import Event, EventType, same
from monitor.jobs import Jobs
from netdisco._tasks import Tasks
from netdisco.cluster.acl import cluster_acl
from netdisco.cluster.jobs import ACTIVE
from netdisco.cluster.schedules import JobSchedule, ScheduleStore, schedule_request
from netdisco.exceptions import ControlRefused
from netdisco.projects.store import check_request

log = structlog.get_logger(__name__)


class Schedules:
    """The cluster's schedules of jobs as this monitor keeps them (module docstring)."""

    def __init__(self, jobs: Jobs, record: Callable[[Event], None]) -> None:
        self.jobs = jobs
        watcher = jobs.watcher
        acl = cluster_acl(watcher.settings.credentials())
        self.store = ScheduleStore(watcher.client, watcher.settings.root, acl)
        self.projects = jobs.projects
        self._record = record
        self._tasks = Tasks()

    def start(self) -> None:
        """Start the loop (it looks only while connected to ZooKeeper)."""
        self._tasks.spawn(self._run(), name="monitor-schedules")

    async def close(self) -> None:
        """Stop the loop."""
        await self._tasks.cancel_all()

    async def _run(self) -> None:
        while True:
            try:
                if self.jobs.watcher.connected:
                    await self.look()
            except KazooException as exc:
                log.info("schedules_look_failed", error=type(exc).__name__)
            await asyncio.sleep(self.jobs.settings.poll)

    async def look(self, now: float | None = None) -> None:
        """Decide every tick that is due now."""
        at = time.time() if now is None else now
        for schedule, version in await self.store.list():
            tick = schedule.due(at)
            if tick is not None:
                await self._decide(schedule, version, tick)

    async def _decide(self, schedule: JobSchedule, version: int, tick: float) -> None:
        previous = await self.jobs.store.get(schedule.last_job) if schedule.last_job else None
        going = previous is not None and previous[0].state in ACTIVE
        job = None if going else schedule.job()
        if job is None:
            new = replace(schedule, last_tick=tick, skipped=schedule.skipped + 1)
        else:
            new = replace(schedule, last_tick=tick, last_job=job.id, fired=schedule.fired + 1)
        if not await self.store.advance(version, new, job):
            return  # another monitor decided this tick (or the schedule is gone)
        kind = EventType.SCHEDULE_SKIPPED if job is None else EventType.SCHEDULE_FIRED
        detail = {
            "schedule": new.id,
            "tick": tick,
            "job": None if job is None else job.id,
            "previous_job": schedule.last_job,
            "spider": new.request.get("spider"),
            "project": new.request.get("project"),
            "fired": new.fired,
            "skipped": new.skipped,
        }
        self._record(Event(type=kind, detail=detail, identity=same(kind.value, new.id, tick)))
        if job is not None:
            self.jobs.wake()

    # -- requests ---------------------------------------------------------------------

    async def create(self, body: Any) -> JobSchedule:
        """A new schedule from a request body; ``ConfigError`` naming the field."""
        made = schedule_request(body)
        project = made.request.get("project")
        if project is not None:
            await check_request(self.projects, project, made.job())
        await self.store.create(made)
        log.info("schedule_created", schedule=made.id, cron=made.cron, every=made.every)
        return made

    async def listing(self, now: float | None = None) -> list[dict[str, Any]]:
        """Every schedule as the HTTP API shows it, with when it ticks next."""
        at = time.time() if now is None else now
        return [view(s, at) for s, _ in await self.store.list()]

    async def set_enabled(self, schedule_id: str, enabled: bool) -> JobSchedule:
        """Enable or disable; enabling starts from now (ticks while disabled are not due)."""
        now = time.time()

        def change(s: JobSchedule) -> JobSchedule:
            start = s.last_tick if s.enabled else max(s.last_tick, now)
            return replace(s, enabled=enabled, last_tick=start)

        done = await self.store.update(schedule_id, change)
        if done is None:
            raise ControlRefused(404, "unknown_schedule", f"no schedule {schedule_id!r}")
        return done

    async def delete(self, schedule_id: str) -> None:
        """Forget a schedule (the jobs it made stay)."""
        if not await self.store.delete(schedule_id):
            raise ControlRefused(404, "unknown_schedule", f"no schedule {schedule_id!r}")


def view(schedule: JobSchedule, now: float) -> dict[str, Any]:
    """A schedule's HTTP shape: its node, and ``next_run`` (None while disabled)."""
    return {**schedule.to_dict(), "next_run": schedule.next_run(now)}
