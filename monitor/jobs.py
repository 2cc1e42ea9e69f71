"""The monitor's half of jobs: create, place, lose, requeue, cancel, prune, report.

Jobs are nodes under ``<root>.jobs`` (:mod:`netdisco.cluster.jobs`), read and
written on the watcher's own ZooKeeper session. Every ``[jobs] poll`` seconds the
monitor lists them and, only while its view of the engines is fresh: marks
``lost`` the placed jobs whose engine (that incarnation) is gone, places a lost
job again when it asked ``on_lost = "requeue"``, places waiting jobs on the
engine with the most free slots, and deletes ended jobs beyond ``[jobs] history``.
Every write is a compare-and-set, so any number of monitors can run this loop:
of two that place the same job, one write fails on the version and that monitor
reads again (no leader, no lock: a monitor that stops costs nothing). Each state
change a listing shows is one event (``job_started``, ``job_finished``, ...),
reported by every monitor that saw it, as engine events are.
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
from monitor.settings import JobsSettings
from monitor.watcher import Watcher
from netdisco._tasks import Tasks, wait_event
from netdisco.cluster.acl import cluster_acl
from netdisco.cluster.jobs import (
    ACTIVE,
    TERMINAL,
    Job,
    JobState,
    JobStore,
    Slots,
    engine_slots,
    fan_out,
    job_request,
    may_run,
    new_id,
    place,
    refuse_unplaceable,
    transition,
)
from netdisco.exceptions import ConfigError, ControlRefused, SpiderLoadError
from netdisco.projects.store import ProjectStore, check_request, project_spider

log = structlog.get_logger(__name__)

_EVENTS = {
    JobState.RUNNING: EventType.JOB_STARTED,
    JobState.FINISHED: EventType.JOB_FINISHED,
    JobState.FAILED: EventType.JOB_FAILED,
    JobState.CANCELLED: EventType.JOB_CANCELLED,
    JobState.LOST: EventType.JOB_LOST,
}


class Jobs:
    """The jobs of the cluster as this monitor keeps them (module docstring)."""

    def __init__(
        self, settings: JobsSettings, watcher: Watcher, record: Callable[[Event], None]
    ) -> None:
        self.settings = settings
        self.watcher = watcher
        self._record = record
        creds = watcher.settings.credentials()
        self.store = JobStore(watcher.client, watcher.settings.root, cluster_acl(creds))
        self.projects = ProjectStore(watcher.client, watcher.settings.root)
        self.jobs: dict[str, Job] = {}  # the last listing (and what this monitor wrote since)
        self._seen: dict[str, JobState] | None = None  # None until the baseline listing
        self._tasks = Tasks()
        self._wake = asyncio.Event()

    def start(self) -> None:
        """Start the loop (it waits for ZooKeeper like the watcher does)."""
        self._tasks.spawn(self._run(), name="monitor-jobs")

    async def close(self) -> None:
        """Stop the loop."""
        await self._tasks.cancel_all()

    def wake(self, _event: Event | None = None) -> None:
        """Look again now (an engine joined or was lost)."""
        self._wake.set()

    async def _run(self) -> None:
        while True:
            try:
                if self.watcher.connected:
                    await self.reconcile()
            except KazooException as exc:
                log.info("jobs_reconcile_failed", error=type(exc).__name__)
            self._wake.clear()
            await wait_event(self._wake, self.settings.poll)

    async def reconcile(self) -> None:
        """One look: report what changed, then decide (only on a fresh view)."""
        jobs = await self.store.list()
        self._report(jobs)
        self.jobs = {j.id: j for j in jobs}
        if not self.watcher.fresh.is_set():
            return  # no engine is lost, and none has room, by a stale view
        await self._lose(jobs)
        await self._requeue()
        await self._place()
        await self._prune()

    # -- events ---------------------------------------------------------------------

    def _report(self, jobs: list[Job]) -> None:
        seen, self._seen = self._seen, {j.id: j.state for j in jobs}
        if seen is None:
            return  # the baseline: what changed while the monitor was away is not news
        for job in jobs:
            if seen.get(job.id) != job.state and job.state in _EVENTS:
                self._event(job)

    def _event(self, job: Job) -> None:
        engine = next((m for m in self.watcher.members() if m.name == job.engine), None)
        data = engine.payload.to_dict() if engine is not None else {}
        detail = {
            "job": job.id,
            "spider": job.spider,
            "state": str(job.state),
            "project": job.project,
            "error": job.error,
        }
        kind = _EVENTS[job.state]
        identity = same(kind.value, job.id, job.attempts)  # a requeued job: a new attempt
        self._record(Event(type=kind, engine_id=job.engine, engine=data, detail=detail,
                           identity=identity))  # fmt: skip
        if self._seen is not None:
            self._seen[job.id] = job.state

    def live(self, job: Job) -> Job:
        """``job`` with the counters its engine's node holds while it runs (the node's
        ``job_stats``, refreshed with its spiders' figures); as stored otherwise."""
        if job.state is not JobState.RUNNING:
            return job
        for member in self.watcher.members():
            payload = member.payload
            if (payload.id, payload.incarnation) == (job.engine, job.incarnation):
                counts = payload.job_stats.get(job.id)
                return replace(job, stats={**job.stats, **counts}) if counts else job
        return job

    def _keep(self, job: Job | None) -> None:
        if job is not None:
            self.jobs[job.id] = job

    # -- decisions ------------------------------------------------------------------

    async def _lose(self, jobs: list[Job]) -> None:
        live = {m.name: m.payload.incarnation for m in self.watcher.members()}
        for job in jobs:
            if job.placed and live.get(job.engine or "") != job.incarnation:
                gone = (job.engine, job.incarnation)
                lost = await self.store.update(job.id, lambda j, g=gone: _lost(j, g))  # type: ignore[misc]
                self._keep(lost)
                if lost is not None:
                    log.warning("job_lost", job=job.id, engine=job.engine)
                    self._event(lost)

    async def _requeue(self) -> None:
        for job in list(self.jobs.values()):
            if job.state is JobState.LOST and will_requeue(job, self.settings.max_attempts):
                self._keep(await self.store.update(job.id, _requeued))

    def slots(self) -> list[Slots]:
        """Every live engine that runs jobs, with its free slots by the jobs placed now."""
        jobs = list(self.jobs.values())
        found = (engine_slots(m.payload, jobs) for m in self.watcher.members())
        return [s for s in found if s is not None]

    async def _place(self) -> None:
        slots = self.slots()
        waiting = [j for j in self.jobs.values() if j.state is JobState.PENDING and not j.engine]
        for job in waiting:
            target = place(job, slots)
            if target is None:
                continue
            placed = await self.store.update(job.id, lambda j, t=target: _placed(j, t))  # type: ignore[misc]
            self._keep(placed)
            if placed is not None:
                slots = [replace(s, free=s.free - (s is target)) for s in slots]
                log.info("job_placed", job=job.id, engine=target.engine)

    async def _prune(self) -> None:
        ended = [j for j in self.jobs.values() if j.state in TERMINAL or _abandoned(j, self)]
        ended.sort(key=lambda j: j.ended_at or j.created_at, reverse=True)
        oldest = time.time() - self.settings.history_days * 86400
        for index, job in enumerate(ended):
            if index >= self.settings.history or (job.ended_at or job.created_at) < oldest:
                await self.store.delete(job.id)
                self.jobs.pop(job.id, None)

    # -- requests -------------------------------------------------------------------

    async def create(self, body: Any, job_id: str | None = None) -> list[Job]:
        """New jobs from a request body (one, or one per engine for ``on = "all"``);
        ``job_id``: the id a Scrapyd client chose (``schedule.json``'s ``jobid``)."""
        job = job_request(body)
        if job_id is not None:
            if await self.store.get(job_id) is not None:
                raise ConfigError("jobid", f"job {job_id} exists already")
            job = replace(job, id=job_id)
        if job.project is not None:  # a spider or command the project lacks: refused now
            await check_request(self.projects, job.project, job)
        if self.watcher.fresh.is_set():  # what cannot run is refused, by a fresh view
            refuse_unplaceable(job, self.slots())
            self._refuse_unoffered(job)
        made = fan_out(job, self.slots()) if job.on == "all" else [job]
        for each in made:
            await self.store.create(each)
            self._keep(each)
            log.info("job_created", job=each.id, spider=each.spider, on=each.on)
        self.wake()
        return made

    def _refuse_unoffered(self, job: Job) -> None:
        """A job of no project naming a spider that no engine it may run on offers (their
        nodes' ``job_spiders``): ``ConfigError`` naming the spiders they do offer. Not
        judged while one of those engines does not say what it offers."""
        if job.project is not None or ":" in job.spider:  # a module:Class: the child judges
            return
        jobs = list(self.jobs.values())
        offers = [
            m.payload.job_spiders
            for m in self.watcher.members()
            if (slots := engine_slots(m.payload, jobs)) is not None and may_run(job.on, slots)
        ]
        if not offers or not all(offers):
            return
        refusals = []
        for offered in offers:
            try:
                project_spider(job.spider, offered, "engine.spider_modules")
                return
            except SpiderLoadError as exc:
                refusals.append(str(exc))
        raise ConfigError("spider", refusals[0])

    async def cancel(self, job_id: str) -> Job:
        """A waiting job ends ``cancelled`` now; a running one is stopped by its engine."""
        done = await self.store.update(job_id, _cancelled)
        if done is None:
            got = await self.store.get(job_id)
            if got is None:
                raise ControlRefused(404, "unknown_job", f"no job {job_id!r}")
            raise ControlRefused(409, "job_ended", f"job {job_id} is {got[0].state}")
        self._keep(done)
        return done

    async def rerun(self, job_id: str) -> Job:
        """The same request again as a new job."""
        got = await self.store.get(job_id)
        if got is None:
            raise ControlRefused(404, "unknown_job", f"no job {job_id!r}")
        old = got[0]
        new = Job(
            id=new_id(),
            spider=old.spider,
            kind=old.kind,
            argv=old.argv,
            project=old.project,
            version=old.version,
            args=old.args,
            settings=old.settings,
            on=old.on,
            on_lost=old.on_lost,
            created_at=time.time(),
        )
        await self.store.create(new)
        self._keep(new)
        self.wake()
        return new


def _lost(job: Job, gone: tuple[str | None, str | None]) -> Job | None:
    if not job.placed or (job.engine, job.incarnation) != gone:
        return None
    error = f"engine {job.engine} was lost while the job was {job.state}"
    return transition(job, JobState.LOST, ended_at=time.time(), error=error)


def _requeued(job: Job) -> Job | None:
    if job.cancel:
        return None
    return transition(job, JobState.PENDING, engine=None, incarnation=None, ended_at=None)


def _placed(job: Job, target: Slots) -> Job | None:
    if job.state is not JobState.PENDING or job.engine is not None or job.cancel:
        return None  # placement sets where a waiting job runs, not its state
    return replace(
        job, engine=target.engine, incarnation=target.incarnation, attempts=job.attempts + 1
    )


def _cancelled(job: Job) -> Job | None:
    """A waiting job ends now; a running one is flagged (its engine stops it, and its end
    is the engine's transition)."""
    if job.state is JobState.RUNNING:
        return replace(job, cancel=True)
    return transition(job, JobState.CANCELLED, cancel=True, ended_at=time.time())


def will_requeue(job: Job, max_attempts: int) -> bool:
    """Whether a job, once lost, is placed again (``on_lost = "requeue"``, attempts left)."""
    return job.on_lost == "requeue" and job.attempts < max_attempts


def _abandoned(job: Job, jobs: Jobs) -> bool:
    """A lost job that will not be placed again is history too."""
    requeue = will_requeue(job, jobs.settings.max_attempts)
    return job.state is JobState.LOST and not requeue and job.state not in ACTIVE
