"""Jobs in ZooKeeper: one persistent node a job, ``<root>.jobs/<id>``, and where it runs.

A sibling of the engine root (like the tombstones), so the monitor's membership
watch never sees it. Every monitor and every engine reads and writes the same
nodes, so any monitor shows the same list and a restart loses none. Every write
is a compare-and-set on the node's version (:meth:`JobStore.update`): two monitors
that place the same job at once cannot both win, and an engine that takes a job
another monitor just re-placed loses the race instead of running it twice.
Whatever a node holds is read through :func:`parse_job`, which never raises.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import secrets
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from enum import StrEnum
from typing import Any

import structlog
from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from netdisco.cluster.commands import check_argv, command_request
from netdisco.cluster.contract import MAX_NODE_DATA, EnginePayload, decode_object
from netdisco.cluster.zk import wait_result
from netdisco.exceptions import ConfigError

#: a job's data is small (its request and final counters); more is refused on write
MAX_JOB_DATA = 32 * 1024
#: the most jobs one listing reads (older finished ones are pruned by ``job_history``)
MAX_JOBS = 5000
_ID = re.compile(r"[0-9a-f]{12}")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
_SPIDER = re.compile(r"[A-Za-z0-9_.:-]{1,200}")
log = structlog.get_logger(__name__)
_BODY_KEYS = frozenset(
    {"project", "version", "spider", "command", "argv", "args", "settings", "on", "on_lost"}
)


class JobState(StrEnum):
    """A job's life: placed and taken while ``pending``, then one terminal state (or lost)."""

    PENDING = "pending"
    RUNNING = "running"
    FINISHED = "finished"
    FAILED = "failed"
    CANCELLED = "cancelled"
    LOST = "lost"


#: states a job never leaves (a lost job may be requeued: it becomes pending again)
TERMINAL = frozenset({JobState.FINISHED, JobState.FAILED, JobState.CANCELLED})
#: states that hold a slot on the engine the job is placed on
ACTIVE = frozenset({JobState.PENDING, JobState.RUNNING})
#: a state -> the states a job may move to from it: the one place (monitor and engine
#: alike) that decides a job's transitions, through :func:`transition`
TRANSITIONS: Mapping[JobState, frozenset[JobState]] = {
    # taken by its engine; cancelled while waiting; its engine lost before it started
    JobState.PENDING: frozenset({JobState.RUNNING, JobState.CANCELLED, JobState.LOST}),
    # its child's end (or its start failed); its engine lost while it ran
    JobState.RUNNING: frozenset(
        {JobState.FINISHED, JobState.FAILED, JobState.CANCELLED, JobState.LOST}
    ),
    JobState.LOST: frozenset({JobState.PENDING}),  # requeued (``on_lost = "requeue"``)
    JobState.FINISHED: frozenset(),
    JobState.FAILED: frozenset(),
    JobState.CANCELLED: frozenset(),
}


@dataclass(frozen=True, kw_only=True)
class Job:
    """One job's node: what was asked, where it runs, and how it ended."""

    id: str
    spider: str  # as asked (a name, or module:Class), the same from start to end
    kind: str = "spider"  # or "command": ``spider`` names a command of its project
    argv: tuple[str, ...] = ()  # a command job's arguments, after the declared ones
    spider_class: str | None = None  # the module:Class it resolved to, once known
    project: str | None = None
    version: str | None = None
    args: Mapping[str, str] = field(default_factory=dict)
    settings: Mapping[str, Any] = field(default_factory=dict)
    on: str | tuple[str, ...] = "any"  # "any", "label=value", or engine ids
    on_lost: str = "fail"  # or "requeue"
    state: JobState = JobState.PENDING
    engine: str | None = None  # where it is placed (None: waiting for a slot)
    incarnation: str | None = None  # of that engine: a restarted engine's job is lost
    created_at: float = 0.0
    started_at: float | None = None
    ended_at: float | None = None
    attempts: int = 0  # placements so far (a requeue adds one)
    cancel: bool = False  # asked to stop: the engine sends SIGTERM
    stats: Mapping[str, Any] = field(default_factory=dict)
    feeds: tuple[Mapping[str, Any], ...] = ()  # {path, items} of local file feeds
    exit_status: int | None = None
    error: str | None = None

    @property
    def placed(self) -> bool:
        """Whether the job holds a slot on an engine now."""
        return self.engine is not None and self.state in ACTIVE

    def to_dict(self) -> dict[str, Any]:
        """The JSON object of the node (and of the HTTP answers)."""
        data = asdict(self)
        data["on"] = self.on if isinstance(self.on, str) else list(self.on)
        data["feeds"] = [dict(f) for f in self.feeds]
        data["argv"] = list(self.argv)
        return data

    def to_json(self) -> bytes:
        """The node's bytes; refused when over :data:`MAX_JOB_DATA`."""
        raw = json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":")).encode()
        if len(raw) > MAX_JOB_DATA:
            raise ConfigError("job", f"{len(raw)} bytes is over the {MAX_JOB_DATA} a job may hold")
        return raw


def allowed(current: JobState, to: JobState) -> bool:
    """Whether :data:`TRANSITIONS` lets a job in ``current`` move to ``to`` (pure)."""
    return to in TRANSITIONS[current]


def transition(job: Job, to: JobState, **changes: Any) -> Job | None:
    """``job`` moved to ``to`` with ``changes``; None when the table refuses the move,
    which is logged with both states and leaves the job as it is."""
    if not allowed(job.state, to):
        log.warning("job_transition_refused", job=job.id, state=str(job.state), to=str(to))
        return None
    return replace(job, state=to, **changes)


def new_id() -> str:
    """A random job id: 12 hex digits, one znode name."""
    return secrets.token_hex(6)


def is_job_id(name: str) -> bool:
    """Whether ``name`` can be a job id (anything else under the root is skipped)."""
    return _ID.fullmatch(name) is not None


def jobs_root(root: str) -> str:
    """Where jobs live: ``<root>.jobs``, outside the engine root's watch."""
    return root.rstrip("/") + ".jobs"


def job_path(root: str, job_id: str) -> str:
    """The node of one job; ``job_id`` must be an id (never a path)."""
    if not is_job_id(job_id):
        raise ConfigError("id", f"{job_id!r} is not a job id")
    return f"{jobs_root(root)}/{job_id}"


# -- reading what a node or a request holds ----------------------------------------


def _strings(key: str, value: Any, limit: int = 100) -> dict[str, str]:
    if not isinstance(value, dict) or len(value) > limit:
        raise ConfigError(key, f"expected an object of at most {limit} strings")
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise ConfigError(key, "every key and value must be a string")
    return dict(value)


def parse_on(value: Any) -> str | tuple[str, ...]:
    """``any``, ``all``, ``label=value`` or a list of engine ids, checked."""
    if isinstance(value, str) and (value in ("any", "all") or _label(value) is not None):
        return value
    if isinstance(value, str):
        value = [value]  # one engine id
    names = value if isinstance(value, list) and 0 < len(value) <= 100 else [None]
    if all(isinstance(v, str) and _NAME.fullmatch(v) for v in names):
        return tuple(names)
    raise ConfigError("on", f'expected "any", "all", "label=value" or engine ids, got {value!r}')


def _label(on: str) -> tuple[str, str] | None:
    key, sep, value = on.partition("=")
    ok = sep and _NAME.fullmatch(key) and _NAME.fullmatch(value)
    return (key, value) if ok else None


def _optional_name(key: str, value: Any) -> str | None:
    if value is None or (isinstance(value, str) and _NAME.fullmatch(value)):
        return value
    raise ConfigError(key, f"expected a name of letters, digits, '.', '_', '-', got {value!r}")


def job_request(body: Any, now: float | None = None) -> Job:
    """A new job from a ``POST .../jobs`` body, every field checked; or ``ConfigError``."""
    if not isinstance(body, dict):
        raise ConfigError("body", 'expected a JSON object {"spider": ..., ...}')
    unknown = sorted(set(body) - _BODY_KEYS)
    if unknown:
        raise ConfigError(unknown[0], f"unknown key (known: {', '.join(sorted(_BODY_KEYS))})")
    settings = body.get("settings", {})
    if not isinstance(settings, dict) or len(settings) > 100:
        raise ConfigError("settings", "expected an object of at most 100 settings")
    kind, spider, argv = command_request(body)
    asked = body.get("spider")
    if kind == "spider" and not (isinstance(asked, str) and _SPIDER.fullmatch(asked)):
        raise ConfigError("spider", f"expected a spider name or 'module:Class', got {asked!r}")
    on_lost = body.get("on_lost", "fail")
    if on_lost not in ("fail", "requeue"):
        raise ConfigError("on_lost", f'expected "fail" or "requeue", got {on_lost!r}')
    job = Job(
        id=new_id(),
        spider=spider,
        kind=kind,
        argv=argv,
        project=_optional_name("project", body.get("project")),
        version=_optional_name("version", body.get("version")),
        args=_strings("args", body.get("args", {})),
        settings=settings,
        on=parse_on(body.get("on", "any")),
        on_lost=on_lost,
        created_at=time.time() if now is None else now,
    )
    job.to_json()  # over the size cap: refused now, not when written
    return job


def _job_fields(data: Mapping[str, Any]) -> dict[str, Any]:
    """The typed fields of a decoded node; ``ValueError``/``TypeError`` when wrong."""
    keys = ("spider_class", "project", "version", "engine", "incarnation", "error")
    strs = {k: data.get(k) for k in keys}
    if not all(v is None or isinstance(v, str) for v in strs.values()):
        raise TypeError("a text field is not a string")
    floats = {k: data.get(k) for k in ("started_at", "ended_at", "exit_status")}
    if not all(v is None or isinstance(v, int | float) for v in floats.values()):
        raise TypeError("a number field is not a number")
    feeds = tuple(f for f in data.get("feeds", ()) if isinstance(f, dict))
    return {
        **strs,
        **floats,
        "exit_status": None if data.get("exit_status") is None else int(data["exit_status"]),
        "args": _strings("args", data.get("args", {})),
        "settings": dict(data.get("settings") or {}),
        "on": parse_on(data.get("on", "any")),
        "on_lost": data.get("on_lost") if data.get("on_lost") == "requeue" else "fail",
        "state": JobState(str(data.get("state"))),
        # a command is a project's: a node saying otherwise is a spider job, held to its checks
        "kind": "command" if data.get("kind") == "command" and data.get("project") else "spider",
        "argv": check_argv("argv", data.get("argv", [])),
        "created_at": float(data.get("created_at") or 0.0),
        "attempts": int(data.get("attempts") or 0),
        "cancel": data.get("cancel") is True,
        "stats": dict(data.get("stats") or {}),
        "feeds": feeds,
    }


def parse_job(name: str, raw: bytes | None) -> Job | None:
    """The job a node holds, or None when it holds anything else; never raises."""
    data = decode_object(raw) if raw is not None and len(raw) <= MAX_NODE_DATA else None
    spider = data.get("spider") if data else None
    if data is None or not is_job_id(name) or not isinstance(spider, str):
        return None
    try:
        return Job(id=name, spider=spider, **_job_fields(data))
    except (ValueError, TypeError, ConfigError, OverflowError):
        return None


# -- placement (pure) ----------------------------------------------------------------


@dataclass(frozen=True)
class Slots:
    """One live engine as placement sees it: id, incarnation, labels and free job slots."""

    engine: str
    incarnation: str | None
    labels: Mapping[str, str]
    free: int


def engine_slots(payload: EnginePayload, jobs: Sequence[Job]) -> Slots | None:
    """An engine's free slots: its ``max_jobs`` less the jobs placed on it; None if it
    runs no jobs (an engine older than jobs, or ``max_jobs = 0``)."""
    most = payload.max_jobs
    if payload.id is None or most is None or most <= 0:
        return None
    held = sum(1 for j in jobs if j.placed and j.engine == payload.id)
    return Slots(payload.id, payload.incarnation, payload.labels, max(0, most - held))


def place(job: Job, engines: Sequence[Slots]) -> Slots | None:
    """Where ``job`` goes now: of the engines it may run on, the one with the most free
    slots (ties: by id, so every monitor picks the same); None while none has a slot."""
    fits = [e for e in engines if e.free > 0 and _allowed(job.on, e)]
    return max(fits, key=lambda e: (e.free, _reverse(e.engine)), default=None)


def _reverse(text: str) -> tuple[int, ...]:
    return tuple(-ord(ch) for ch in text)  # max() of this is the smallest id


def refuse_unplaceable(job: Job, engines: Sequence[Slots]) -> None:
    """``ConfigError`` naming the engines that run jobs when ``job`` names engines (or a
    label) none of which runs jobs in the cluster now: it would wait for ever. ``any``
    waits for the first engine, ``all`` is judged by :func:`fan_out`."""
    if job.on in ("any", "all") or any(_allowed(job.on, e) for e in engines):
        return
    have = ", ".join(_described(e) for e in sorted(engines, key=lambda e: e.engine)) or "none"
    if isinstance(job.on, tuple):
        named = ", ".join(repr(name) for name in job.on)
        said = f"no engine {named} runs jobs in the cluster"
    else:
        said = f"no engine that runs jobs has the label {job.on}"
    raise ConfigError("on", f"{said}; the engines that run jobs: {have}")


def _described(engine: Slots) -> str:
    labels = ", ".join(f"{k}={v}" for k, v in sorted(engine.labels.items()))
    return f"{engine.engine} ({labels})" if labels else engine.engine


def may_run(on: str | tuple[str, ...], engine: Slots) -> bool:
    """Whether a job asking ``on`` may run on ``engine``."""
    return _allowed(on, engine)


def _allowed(on: str | tuple[str, ...], engine: Slots) -> bool:
    if on in ("any", "all"):
        return True
    if isinstance(on, tuple):
        return engine.engine in on
    label = _label(on)
    return label is not None and engine.labels.get(label[0]) == label[1]


def fan_out(job: Job, engines: Sequence[Slots]) -> list[Job]:
    """``on = "all"``: one job per live engine, each bound to it (same spider, so the
    same shared frontier); ``ConfigError`` when no engine runs jobs."""
    if not engines:
        raise ConfigError("on", "no engine of the cluster runs jobs now")
    return [replace(job, id=new_id(), on=(e.engine,)) for e in engines]


# -- the store -----------------------------------------------------------------------


class JobStore:
    """Jobs under ``<root>.jobs`` through one kazoo client; every call awaited on the loop."""

    def __init__(self, client: KazooClient, root: str, acl: list[Any] | None = None) -> None:
        self.client = client
        self.root = jobs_root(root)
        self._base = root
        self._acl = acl

    async def create(self, job: Job) -> None:
        """Write a new job's node (and the jobs root when missing)."""
        path = job_path(self._base, job.id)
        try:
            await wait_result(self.client.create_async(path, job.to_json(), acl=self._acl))
        except NoNodeError:
            with contextlib.suppress(NodeExistsError):
                await wait_result(self.client.create_async(self.root, b"", acl=self._acl))
            await wait_result(self.client.create_async(path, job.to_json(), acl=self._acl))

    async def get(self, job_id: str) -> tuple[Job, int] | None:
        """A job and its node version, or None when there is none (or it is not a job)."""
        try:
            raw, stat = await wait_result(self.client.get_async(job_path(self._base, job_id)))
        except NoNodeError:
            return None
        job = parse_job(job_id, raw)
        return None if job is None else (job, stat.version)

    async def list(self) -> list[Job]:
        """Every job (at most :data:`MAX_JOBS`), oldest first; what is not a job is skipped."""
        try:
            names = await wait_result(self.client.get_children_async(self.root))
        except NoNodeError:
            return []
        names = sorted(n for n in names if is_job_id(n))[:MAX_JOBS]
        reads = [wait_result(self.client.get_async(f"{self.root}/{n}")) for n in names]
        found = await asyncio.gather(*reads, return_exceptions=True)
        jobs = [
            parse_job(name, got[0])
            for name, got in zip(names, found, strict=True)
            if not isinstance(got, BaseException)
        ]
        return sorted((j for j in jobs if j is not None), key=lambda j: (j.created_at, j.id))

    async def update(self, job_id: str, change: Callable[[Job], Job | None]) -> Job | None:
        """Compare-and-set: ``change`` the job as read; written only if nobody wrote it
        meanwhile (else read again and retried). None: no job, or ``change`` declined."""
        for _ in range(20):
            got = await self.get(job_id)
            if got is None:
                return None
            new = change(got[0])
            if new is None:
                return None
            try:
                path = job_path(self._base, job_id)
                await wait_result(self.client.set_async(path, new.to_json(), version=got[1]))
            except BadVersionError:
                continue
            return new
        return None

    async def delete(self, job_id: str) -> None:
        """Forget one job (pruned history)."""
        with contextlib.suppress(NoNodeError):
            await wait_result(self.client.delete_async(job_path(self._base, job_id)))
