"""The engine's half of jobs: take the jobs placed on it, run each as a child process.

The monitor places a job by writing this engine's id and incarnation into the
job's node (``netdisco.cluster.jobs``); :class:`JobRunner` lists the jobs every
``poll`` seconds on its own ZooKeeper session, takes a placed one with a
compare-and-set to ``running`` and starts :mod:`netdisco.engine.jobchild` for it
(:class:`JobProcess`), so a spider that crashes, leaks or blocks cannot take the
engine, its node or its other jobs down. A cancel request is SIGTERM to the
child, then SIGKILL ``stop_deadline`` (plus a grace for the flush) later. When
the child ends, its last status line and exit status become the job's end.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import re
import signal
import sys
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import structlog
from kazoo.client import KazooClient
from kazoo.exceptions import KazooException
from kazoo.retry import KazooRetry

from netdisco._tasks import Tasks, in_own_thread
from netdisco.cluster.acl import cluster_acl
from netdisco.cluster.commands import seconds
from netdisco.cluster.contract import JOB_COUNTERS, MAX_JOB_SPIDERS
from netdisco.cluster.jobs import Job, JobState, JobStore, is_job_id, transition
from netdisco.cluster.settings import ZooKeeperSettings
from netdisco.cluster.zk import close_client
from netdisco.crawl.loader import on_path
from netdisco.crawl.settings import Settings
from netdisco.engine.config import EngineSettings
from netdisco.engine.joblog import CHUNK, MAX_LINE, LogWriter, job_dir
from netdisco.engine.launch import module_spiders
from netdisco.exceptions import NetdiscoError
from netdisco.projects.archive import SPIDER_REF

if TYPE_CHECKING:
    from netdisco.projects.install import InstalledProject

log = structlog.get_logger(__name__)

#: seconds a stopped child has past its ``stop_deadline`` to flush before SIGKILL
FLUSH_GRACE = 2.0
_DEFAULT_DEADLINE = Settings().stop_deadline
#: what a child's status line holds besides its counters
_NOT_STATS = frozenset({"feeds", "final", "error", "spider_class"})
#: the module a job's child runs, by the job's kind
CHILDREN = {"spider": "netdisco.engine.jobchild", "command": "netdisco.engine.jobcommand"}


def jobs_dir(settings: EngineSettings, engine_id: str, zookeeper: ZooKeeperSettings) -> Path:
    """Where this engine keeps its jobs' directories: ``jobs_dir``, or, by default, the
    user's state folder (``$XDG_STATE_HOME``, else ``~/.local/state``) under a folder of
    the cluster (its ZooKeeper hosts and root) and one of the engine, so that the jobs and
    project caches of two clusters on one machine never share a folder."""
    if settings.jobs_dir is not None:
        return Path(settings.jobs_dir)
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "netdisco" / "jobs" / cluster_folder(zookeeper) / engine_id


def cluster_folder(zookeeper: ZooKeeperSettings) -> str:
    """A folder name of one cluster: its hosts and root, readable, and a hash of them."""
    where = f"{zookeeper.hosts}{zookeeper.root}"
    readable = re.sub(r"[^A-Za-z0-9.-]+", "_", where).strip("_")[:60]
    return f"{readable}-{hashlib.sha256(where.encode()).hexdigest()[:8]}"


def offered_spiders(settings: EngineSettings) -> dict[str, str]:
    """``module:Class`` -> name of the spiders of ``spider_modules``, which the engine's
    node offers so that the monitor refuses a job of no project naming another one; {}
    (not said: the monitor does not judge) when a module does not import, said in the log."""
    try:
        with on_path(os.getcwd()):  # as the job's child finds them (python -m, here)
            found = module_spiders(settings.spider_modules)
    except NetdiscoError as exc:
        log.warning("job_spiders_unknown", error=str(exc))
        return {}
    return dict(sorted(found.items())[:MAX_JOB_SPIDERS])


async def batches(reader: asyncio.StreamReader) -> AsyncIterator[list[bytes]]:
    """A pipe's lines, as they come in reads, each cut at :data:`MAX_LINE` so none holds
    memory unbounded."""
    pending = b""
    while chunk := await reader.read(CHUNK):
        pending += chunk
        *whole, pending = pending.split(b"\n")
        if len(pending) > MAX_LINE:
            whole.append(pending)
            pending = b""
        yield [line[:MAX_LINE] for line in whole]
    if pending:
        yield [pending[:MAX_LINE]]


def deadline_of(job: Job) -> float:
    """The job's ``stop_deadline`` setting, if a sane number; else the default."""
    found = seconds(job.settings.get("stop_deadline"))
    return _DEFAULT_DEADLINE if found is None else found


def _command(job: Job, installed: InstalledProject) -> dict[str, Any]:
    """A command job's spec: the command its version declares, then the job's arguments,
    run in the version's ``src/`` with its venv; ``ConfigError`` if it declares none."""
    from netdisco.projects.commands import project_command  # projects: only for projects

    argv = [*project_command(job.project, job.spider, installed.commands), *job.argv]
    return {"command": {"argv": argv, "cwd": str(installed.path), "venv": str(installed.venv)}}


class JobProcess:
    """One job's child: its status from stdout, its stderr into the job's log file."""

    def __init__(self, job: Job, directory: Path, spec: dict[str, Any], log_max: int) -> None:
        self.job = job
        self.directory = directory
        self.spec = spec
        self.log_max = log_max
        self.status: dict[str, Any] = {}
        self.cancelled = False  # SIGTERM sent on request (cancel or the engine's stop)
        self.abandoned = False  # stopped because the engine stops: the job is lost
        self.proc: asyncio.subprocess.Process | None = None
        self._tasks = Tasks()
        self._readers: list[asyncio.Task[None]] = []

    @property
    def log_path(self) -> Path:
        """The job's current log file."""
        return self.directory / "job.log"

    async def start(self, python: str = sys.executable, cwd: Path | None = None) -> None:
        """Write the spec and start the child (its own session: a terminal's ^C is ours)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        spec_path = self.directory / "spec.json"
        spec_path.write_text(json.dumps(self.spec), "utf-8")
        writer = LogWriter(self.log_path, self.log_max)
        env = {k: v for k, v in os.environ.items() if not k.startswith("NETDISCO_")}
        pipe = asyncio.subprocess.PIPE
        try:
            self.proc = await asyncio.create_subprocess_exec(
                python,
                "-m",
                CHILDREN[self.job.kind],
                str(spec_path),
                stdin=pipe,
                stdout=pipe,
                stderr=pipe,
                cwd=cwd,
                env=env,
                start_new_session=True,
            )
        except BaseException:
            writer.close()
            raise
        assert self.proc.stdout is not None
        assert self.proc.stderr is not None
        self._readers = [
            self._tasks.spawn(self._read_status(self.proc.stdout)),
            self._tasks.spawn(self._read_log(self.proc.stderr, writer)),
        ]

    async def _read_status(self, reader: asyncio.StreamReader) -> None:
        async for batch in batches(reader):
            for line in batch:
                with contextlib.suppress(ValueError, RecursionError):
                    data = json.loads(line)
                    if isinstance(data, dict):
                        self.status = data

    async def _read_log(self, reader: asyncio.StreamReader, writer: LogWriter) -> None:
        try:
            async for batch in batches(reader):
                for line in batch:
                    writer.write(line)
                writer.flush()
        finally:
            writer.close()

    def terminate(self, deadline: float) -> None:
        """SIGTERM now; SIGKILL if the child still runs ``deadline`` + the grace later."""
        if self.proc is None or self.proc.returncode is not None or self.cancelled:
            return
        self.cancelled = True
        self.proc.send_signal(signal.SIGTERM)
        self._tasks.spawn(self._kill_after(deadline + FLUSH_GRACE))

    async def _kill_after(self, seconds: float) -> None:
        await asyncio.sleep(seconds)
        if self.proc is not None and self.proc.returncode is None:
            log.warning("job_killed", job=self.job.id, after=seconds)
            self.proc.kill()

    async def wait(self) -> tuple[JobState, dict[str, Any]]:
        """Until the child ends; the state it ended in and what the job's node records."""
        assert self.proc is not None
        code = await self.proc.wait()
        await asyncio.gather(*self._readers, return_exceptions=True)
        await self._tasks.cancel_all()
        with contextlib.suppress(OSError):  # kept with the log: the feeds outlive the child
            (self.directory / "status.json").write_text(json.dumps(self.status), "utf-8")
        return self.ended(code)

    def ended(self, code: int) -> tuple[JobState, dict[str, Any]]:
        """The job's end from the last status line and the exit status: the state it ends
        in (written through the transition table) and the fields that go with it."""
        status = self.status
        said = status.get("state") if status.get("final") else None
        if self.abandoned:
            state = JobState.LOST
        elif self.cancelled:
            state = JobState.CANCELLED
        elif said == "finished" and code == 0:
            state = JobState.FINISHED
        else:
            state = JobState.FAILED
        error = status.get("error") if isinstance(status.get("error"), str) else None
        if state is JobState.LOST:
            error = "its engine stopped"
        elif state is JobState.FAILED and error is None:
            error = f"the job's process exited with status {code}"
        stats = {k: v for k, v in status.items() if k not in _NOT_STATS}
        feeds = tuple(f for f in status.get("feeds") or () if isinstance(f, dict))
        ref = status.get("spider_class")
        valid = isinstance(ref, str) and SPIDER_REF.fullmatch(ref)
        spider = ref if valid else self.job.spider_class
        return (
            state,
            {
                "spider_class": spider,  # as resolved; ``spider`` stays as asked
                "version": self.job.version,
                "ended_at": time.time(),
                "exit_status": code,
                "stats": stats,
                "feeds": feeds[:100],
                "error": error,
            },
        )


class JobRunner:
    """Takes the jobs placed on this engine incarnation and runs them (module docstring)."""

    def __init__(
        self,
        settings: EngineSettings,
        zookeeper: ZooKeeperSettings,
        incarnation: str,
        engine_id: Callable[[], str],
        on_change: Callable[[], None],
        poll: float = 0.5,
    ) -> None:
        self.settings = settings
        self.zookeeper = zookeeper
        self.incarnation = incarnation
        self._engine_id = engine_id
        self._on_change = on_change
        self.poll = poll
        self.running: dict[str, JobProcess] = {}
        self._client: KazooClient | None = None
        self._store: JobStore | None = None
        self._tasks = Tasks()  # the poll loop
        self._ends = Tasks()  # one per job taken: starts its child, waits, writes its end
        self._starting: set[str] = set()  # taken, its project installing or child starting
        self.offered = offered_spiders(settings)

    @property
    def directory(self) -> Path:
        """Where this engine's jobs keep their logs."""
        return jobs_dir(self.settings, self._engine_id(), self.zookeeper)

    def active(self, job_id: str) -> bool:
        """Whether the job is this engine's now: starting (its project installing, its
        child starting) or running. A log follower stops only when this turns false."""
        return job_id in self.running or job_id in self._starting

    def status(self) -> list[dict[str, Any]]:
        """The running jobs as ``GET /netdiscovery/spiders`` lists them."""
        return [
            {
                **p.status,
                "name": f"job-{p.job.id}",
                "job": p.job.id,
                "spider": p.job.spider,
                "state": p.status.get("state", "starting"),
                "final": None,
            }
            for p in self.running.values()
        ]

    def counters(self) -> dict[str, dict[str, int]]:
        """The running jobs' counters from their children's last status lines, for the
        engine's node (the path a spider's figures take to the monitor)."""
        return {
            job_id: {
                k: v
                for k in JOB_COUNTERS
                if isinstance(v := p.status.get(k), int) and not isinstance(v, bool)
            }
            for job_id, p in self.running.items()
        }

    def recent(self, limit: int = 50) -> list[dict[str, Any]]:
        """The jobs this engine ran, for its status page: running ones first, then those
        whose directory is under ``jobs_dir``, newest first (at most ``limit``)."""
        try:
            found = [d for d in self.directory.iterdir() if is_job_id(d.name)]
            ended = sorted(((d.stat().st_mtime, d.name) for d in found), reverse=True)
        except OSError:
            ended = []
        running = [(time.time(), job_id) for job_id in self.running]
        rows = []
        for at, job_id in [*running, *((a, j) for a, j in ended if j not in self.running)]:
            status = self.last_status(job_id)
            process = self.running.get(job_id)
            spider = process.job.spider if process else status.get("spider_class", "-")
            counts = {k: status.get(k, "-") for k in ("succeeded", "items", "failed")}
            state = "running" if process else status.get("state", "-")
            rows.append({"job": job_id, "state": state, "spider": spider, **counts, "at": at})
        return rows[:limit]

    def last_status(self, job_id: str) -> dict[str, Any]:
        """The last status line of a job running, or ended on this engine ({}: none)."""
        process = self.running.get(job_id)
        status: Any = process.status if process is not None else {}
        if process is None:
            with contextlib.suppress(OSError, ValueError, RecursionError):
                status = json.loads((job_dir(self.directory, job_id) / "status.json").read_text())
        return status if isinstance(status, dict) else {}

    def kept(self, job_id: str) -> dict[str, int]:
        """How many items the job kept in its directory, and dropped past the bound."""
        status = self.last_status(job_id)
        counts = {k: status.get(k) for k in ("items_kept", "items_dropped")}
        return {k: v if isinstance(v, int) else 0 for k, v in counts.items()}

    def feeds(self, job_id: str) -> list[str]:
        """The feed files a job (running, or ended on this engine) reported."""
        feeds = self.last_status(job_id).get("feeds")
        paths = [f.get("path") for f in feeds or () if isinstance(f, dict)]
        return [p for p in paths if isinstance(p, str)]

    async def start(self) -> None:
        """Connect (in the background) and start polling for placed jobs."""
        creds = self.zookeeper.credentials()
        client = KazooClient(
            hosts=self.zookeeper.hosts,
            timeout=self.zookeeper.session_timeout,
            connection_retry=KazooRetry(max_tries=-1, delay=0.1, max_delay=2.0),
            auth_data=None if creds is None else creds.auth_data,
        )
        self._client = client
        self._store = JobStore(client, self.zookeeper.root, cluster_acl(creds))
        client.start_async()
        self._tasks.spawn(self._run(), name="jobs-poll")

    async def _run(self) -> None:
        while True:
            try:
                await self._tick()
            except KazooException as exc:
                log.info("jobs_poll_failed", error=type(exc).__name__)
            await asyncio.sleep(self.poll)

    async def _tick(self) -> None:
        assert self._store is not None
        mine = [
            j
            for j in await self._store.list()
            if j.engine == self._engine_id() and j.incarnation == self.incarnation
        ]
        for job in mine:
            process = self.running.get(job.id)
            if process is not None and job.cancel:
                process.terminate(deadline_of(job))
            elif process is None and job.state is JobState.PENDING and not job.cancel:
                await self._take(job)

    async def _take(self, job: Job) -> None:
        assert self._store is not None
        me, incarnation = self._engine_id(), self.incarnation

        def still_ours(j: Job) -> bool:
            return j.engine == me and j.incarnation == incarnation

        if (
            len(self.running) + len(self._starting) >= self.settings.max_jobs
        ):  # a stale monitor over-placed: give back
            await self._store.update(
                job.id,
                lambda j: (
                    replace(j, engine=None, incarnation=None)
                    if still_ours(j) and j.state is JobState.PENDING
                    else None
                ),
            )
            return
        now = time.time()
        taken = await self._store.update(
            job.id,
            lambda j: transition(j, JobState.RUNNING, started_at=now) if still_ours(j) else None,
        )
        if taken is not None:
            self._starting.add(taken.id)
            self._ends.spawn(self._launch(taken))

    def _spec(self, job: Job, more: dict[str, Any]) -> dict[str, Any]:
        return {
            "job": job.to_dict(),
            "directory": str(job_dir(self.directory, job.id).absolute()),
            "items_max": self.settings.job_items_max,
            "engine_id": self._engine_id(),
            "owner": self.incarnation,
            "feeds_dir": self.settings.feeds_dir,
            "frontier": self.settings.job_frontier,
            "stop_deadline": deadline_of(job),
            **more,  # the modules a spider may load, or the command to run
        }

    async def _launch(self, job: Job) -> None:
        """Install the job's project (if any), start its child, then wait for its end."""
        try:
            job, python, cwd, more = await self._environment(job)
            directory = job_dir(self.directory, job.id)
            process = JobProcess(job, directory, self._spec(job, more), self.settings.job_log_max)
            await process.start(python, cwd)
        except (OSError, NetdiscoError) as exc:
            log.error("job_start_failed", job=job.id, error=str(exc))
            error = f"cannot start the job: {exc}"
            self._log_failure(job, error)
            await self._write_end(job, JobState.FAILED, ended_at=time.time(), error=error)
            return
        finally:
            self._starting.discard(job.id)
        pid = process.proc.pid if process.proc else None
        log.info("job_started", job=job.id, spider=job.spider, pid=pid)
        self.running[job.id] = process
        self._on_change()
        await self._finish(process)

    def _log_failure(self, job: Job, error: str) -> None:
        """A start that failed, said in the job's log too, where ``jobs log`` reads."""
        line = {"event": "job_start_failed", "level": "error", "job": job.id, "error": error}
        with contextlib.suppress(OSError):
            directory = job_dir(self.directory, job.id)
            directory.mkdir(parents=True, exist_ok=True)
            writer = LogWriter(directory / "job.log", self.settings.job_log_max)
            writer.write(json.dumps(line).encode())
            writer.close()

    async def _environment(self, job: Job) -> tuple[Job, str, Path | None, dict[str, Any]]:
        """The job (its spider and version resolved), the Python and directory it runs
        in, and what its spec adds: the modules it may load (the project's venv, or the
        engine's own), or a command job's command."""
        if job.project is None:
            return job, sys.executable, None, {"spider_modules": list(self.settings.spider_modules)}
        from netdisco.projects import install  # uv and archives: only for projects
        from netdisco.projects.store import project_spider

        assert self._client is not None
        got = await install(
            self._client, self.zookeeper.root, job.project, job.version, self.directory / "projects"
        )
        if job.kind == "command":
            return replace(job, version=got.version), str(got.python), got.path, _command(job, got)
        spider = project_spider(job.spider, got.names)
        modules = sorted({ref.partition(":")[0] for ref in got.spiders})
        resolved = replace(job, spider_class=spider, version=got.version)
        return resolved, str(got.python), got.path, {"spider_modules": modules}

    async def _finish(self, process: JobProcess) -> None:
        state, changes = await process.wait()
        job_id = process.job.id
        log.info("job_ended", job=job_id, state=str(state), exit_status=changes["exit_status"])
        try:
            await self._write_end(process.job, state, **changes)
        finally:
            self.running.pop(job_id, None)
            self._on_change()

    async def _write_end(self, taken: Job, state: JobState, **changes: Any) -> None:
        """The end of the placement we took, written unless it was taken from us meanwhile
        (requeued elsewhere); the transition table refuses ending a job no longer running
        (lost meanwhile)."""
        assert self._store is not None
        job_id = taken.id
        me = (self._engine_id(), self.incarnation, taken.attempts)

        def end(j: Job) -> Job | None:
            ours = (j.engine, j.incarnation, j.attempts) == me
            return transition(j, state, **changes) if ours else None

        for attempt in range(10):
            try:
                await self._store.update(job_id, end)
                return
            except KazooException as exc:
                log.warning("job_end_not_written", job=job_id, error=type(exc).__name__)
                await asyncio.sleep(min(2.0, 0.1 * 2**attempt))

    async def stop(self) -> None:
        """Stop every child (SIGTERM, then SIGKILL), write their ends, close the session."""
        await self._tasks.cancel_all()
        for process in self.running.values():
            process.abandoned = True
            process.terminate(deadline_of(process.job))
        if self._ends:
            await asyncio.wait(list(self._ends), timeout=_DEFAULT_DEADLINE + 3 * FLUSH_GRACE)
        await self._ends.cancel_all()
        if self._client is not None:
            await in_own_thread(partial(close_client, self._client), "zk-close")
            self._client = None
