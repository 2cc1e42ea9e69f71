"""Schedules of jobs in ZooKeeper: one persistent node a schedule, ``<root>.schedules/<id>``.

A schedule is a job request (what ``POST .../jobs`` takes) and when to make it: a
cron expression or an interval, with the tick arithmetic of
:mod:`netdisco.cluster.ticks`. Its node also holds the last tick decided and the
job that tick made, so any monitor shows the same and a restart loses none.

A tick is decided once for the whole cluster: the decision is one ZooKeeper
transaction that sets the schedule's node *at the version read* and, when the tick
fires, creates the job's node (:meth:`ScheduleStore.advance`). Of two monitors
that decide the same tick, one transaction fails on the version and nothing of it
is written, so a tick never makes two jobs and never makes a job without the
schedule saying so. Whatever a node holds is read through :func:`parse_schedule_node`,
which never raises.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, replace
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError, RolledBackError

from netdisco.cluster.contract import MAX_NODE_DATA, decode_object
from netdisco.cluster.jobs import Job, is_job_id, job_path, job_request, jobs_root, new_id
from netdisco.cluster.ticks import Schedule, parse_schedule
from netdisco.cluster.zk import wait_result
from netdisco.exceptions import ConfigError

#: the shortest interval: a job's process alone costs about half a second to start
MIN_EVERY = 1.0
#: the longest interval (a year): anything longer is a typo, not a schedule
MAX_EVERY = 366 * 86400.0
#: the most schedules one listing reads
MAX_SCHEDULES = 1000
#: a schedule's node: its job request (at most 32 KiB, as a job's) and a few numbers
MAX_SCHEDULE_DATA = 40 * 1024
_TIMING_KEYS = frozenset({"cron", "every", "enabled"})


@dataclass(frozen=True, kw_only=True)
class JobSchedule:
    """One schedule's node: the job it makes, when, and what its ticks did."""

    id: str
    request: Mapping[str, Any]  # a job request body, checked by ``job_request``
    cron: str | None = None
    every: float | None = None
    enabled: bool = True
    created_at: float = 0.0
    last_tick: float = 0.0  # the last tick decided (fired or skipped); ticks after it are due
    last_job: str | None = None  # the job the last fired tick made
    fired: int = 0
    skipped: int = 0  # ticks while the previous job was still pending or running

    @property
    def schedule(self) -> Schedule:
        """The tick arithmetic of this schedule."""
        return Schedule(cron=self.cron, every=self.every)

    def due(self, now: float) -> float | None:
        """The tick to decide now: the latest one at or before ``now`` and after
        ``last_tick`` (ticks missed while no monitor ran are one tick, not many)."""
        if not self.enabled:
            return None
        tick = self.schedule.last_run(now)
        return tick if tick > self.last_tick else None

    def job(self) -> Job:
        """The job a fired tick makes: the request, as a new job."""
        return replace(job_request(dict(self.request)), id=new_id())

    def to_dict(self) -> dict[str, Any]:
        """The JSON object of the node (and of the HTTP answers, with ``next_run``)."""
        data = asdict(self)
        data["request"] = dict(self.request)
        return data

    def to_json(self) -> bytes:
        """The node's bytes; refused when over :data:`MAX_SCHEDULE_DATA`."""
        raw = json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":")).encode()
        if len(raw) > MAX_SCHEDULE_DATA:
            raise ConfigError("schedule", f"{len(raw)} bytes is over {MAX_SCHEDULE_DATA}")
        return raw

    def next_run(self, now: float) -> float | None:
        """When it ticks next (None while disabled)."""
        return self.schedule.next_run(max(now, self.last_tick)) if self.enabled else None


def schedules_root(root: str) -> str:
    """Where schedules live: ``<root>.schedules``, outside the engine root's watch."""
    return root.rstrip("/") + ".schedules"


def schedule_path(root: str, schedule_id: str) -> str:
    """The node of one schedule; ``schedule_id`` must be an id (never a path)."""
    if not is_job_id(schedule_id):
        raise ConfigError("id", f"{schedule_id[:40]!r} is not a schedule id")
    return f"{schedules_root(root)}/{schedule_id}"


def timing(cron: Any, every: Any) -> Schedule:
    """``cron`` or ``every`` of a request, checked: exactly one, a cron that fires, an
    interval of :data:`MIN_EVERY` to :data:`MAX_EVERY` seconds."""
    if cron is None and every is None:
        raise ConfigError("cron", 'set "cron" or "every"')
    if cron is not None and every is not None:
        raise ConfigError("every", 'set "cron" or "every", not both')
    try:
        found = parse_schedule(cron, every, key="")
    except ConfigError as exc:  # named as this request names it, not as a TOML key
        reason = str(exc).partition(": ")[2]
        raise ConfigError("cron" if cron is not None else "every", reason) from None
    assert found is not None
    if found.every is not None and not MIN_EVERY <= found.every <= MAX_EVERY:
        raise ConfigError(
            "every", f"must be from {MIN_EVERY:g} s to {MAX_EVERY / 86400:g} days, got {every!r}"
        )
    return found


def schedule_request(body: Any, now: float | None = None) -> JobSchedule:
    """A new schedule from a ``POST .../schedules`` body, every field checked; or
    ``ConfigError`` naming the field. The job part is checked as a job request."""
    if not isinstance(body, dict):
        raise ConfigError("body", 'expected a JSON object {"spider": ..., "cron": ...}')
    request = {k: v for k, v in body.items() if k not in _TIMING_KEYS}
    if job_request(request).on == "all":  # refused now, not at the first tick
        raise ConfigError("on", '"all" is not for schedules: name the engines or a label')
    found = timing(body.get("cron"), body.get("every"))
    enabled = body.get("enabled", True)
    if not isinstance(enabled, bool):
        raise ConfigError("enabled", f"expected true or false, got {enabled!r}")
    created = time.time() if now is None else now
    made = JobSchedule(
        id=new_id(),
        request=request,
        cron=found.cron,
        every=found.every,
        enabled=enabled,
        created_at=created,
        last_tick=created,  # the first tick is the first one after its creation
    )
    made.to_json()
    return made


def _fields(data: Mapping[str, Any]) -> dict[str, Any]:
    request = data.get("request")
    if not isinstance(request, dict):
        raise TypeError("no request")
    job_request(request)
    found = timing(data.get("cron"), data.get("every"))
    last_job = data.get("last_job")
    if last_job is not None and not (isinstance(last_job, str) and is_job_id(last_job)):
        raise TypeError("last_job is not a job id")
    return {
        "request": request,
        "cron": found.cron,
        "every": found.every,
        "enabled": data.get("enabled") is not False,
        "created_at": float(data.get("created_at") or 0.0),
        "last_tick": float(data.get("last_tick") or 0.0),
        "last_job": last_job,
        "fired": max(0, int(data.get("fired") or 0)),
        "skipped": max(0, int(data.get("skipped") or 0)),
    }


def parse_schedule_node(name: str, raw: bytes | None) -> JobSchedule | None:
    """The schedule a node holds, or None when it holds anything else; never raises."""
    data = decode_object(raw) if raw is not None and len(raw) <= MAX_NODE_DATA else None
    if data is None or not is_job_id(name):
        return None
    try:
        return JobSchedule(id=name, **_fields(data))
    except (ValueError, TypeError, ConfigError, OverflowError):
        return None


class ScheduleStore:
    """Schedules under ``<root>.schedules`` through one kazoo client; every call awaited."""

    def __init__(self, client: KazooClient, root: str, acl: list[Any] | None = None) -> None:
        self.client = client
        self.root = schedules_root(root)
        self._base = root
        self._acl = acl

    async def _ensure(self, path: str) -> None:
        with contextlib.suppress(NodeExistsError):
            await wait_result(self.client.create_async(path, b"", acl=self._acl))

    async def create(self, schedule: JobSchedule) -> None:
        """Write a new schedule's node (and the schedules root when missing)."""
        await self._ensure(self.root)
        path = schedule_path(self._base, schedule.id)
        await wait_result(self.client.create_async(path, schedule.to_json(), acl=self._acl))

    async def get(self, schedule_id: str) -> tuple[JobSchedule, int] | None:
        """A schedule and its node version, or None when there is none."""
        try:
            path = schedule_path(self._base, schedule_id)
            raw, stat = await wait_result(self.client.get_async(path))
        except NoNodeError:
            return None
        found = parse_schedule_node(schedule_id, raw)
        return None if found is None else (found, stat.version)

    async def list(self) -> list[tuple[JobSchedule, int]]:
        """Every schedule with its version (at most :data:`MAX_SCHEDULES`), oldest first."""
        try:
            names = await wait_result(self.client.get_children_async(self.root))
        except NoNodeError:
            return []
        names = sorted(n for n in names if is_job_id(n))[:MAX_SCHEDULES]
        reads = [wait_result(self.client.get_async(f"{self.root}/{n}")) for n in names]
        found = await asyncio.gather(*reads, return_exceptions=True)
        out = []
        for name, got in zip(names, found, strict=True):
            if isinstance(got, BaseException):
                continue
            schedule = parse_schedule_node(name, got[0])
            if schedule is not None:
                out.append((schedule, got[1].version))
        return sorted(out, key=lambda s: (s[0].created_at, s[0].id))

    async def update(
        self, schedule_id: str, change: Callable[[JobSchedule], JobSchedule]
    ) -> JobSchedule | None:
        """Compare-and-set ``change`` (retried on a concurrent write); None: no schedule."""
        for _ in range(20):
            got = await self.get(schedule_id)
            if got is None:
                return None
            new = change(got[0])
            path = schedule_path(self._base, schedule_id)
            try:
                await wait_result(self.client.set_async(path, new.to_json(), version=got[1]))
            except BadVersionError:
                continue
            return new
        return None

    async def delete(self, schedule_id: str) -> bool:
        """Forget one schedule (its jobs stay); False when there was none."""
        try:
            await wait_result(self.client.delete_async(schedule_path(self._base, schedule_id)))
        except NoNodeError:
            return False
        return True

    async def advance(self, version: int, new: JobSchedule, job: Job | None) -> bool:
        """Decide a tick: write ``new`` if the node is still at ``version`` and, in the
        same transaction, create ``job``'s node. False (nothing written) when another
        monitor decided first or the schedule was deleted."""
        tx = self.client.transaction()
        tx.set_data(schedule_path(self._base, new.id), new.to_json(), version=version)
        if job is not None:
            await self._ensure(jobs_root(self._base))
            tx.create(job_path(self._base, job.id), job.to_json(), acl=self._acl)
        results = await wait_result(tx.commit_async())
        lost = (BadVersionError, NoNodeError, NodeExistsError, RolledBackError)
        if any(isinstance(r, lost) for r in results):
            return False
        for result in results:
            if isinstance(result, Exception):
                raise result
        return True
