"""The crawl's own process under ``-j N``: the workers, the feeds, the one summary.

``ProcessCrawl.run`` starts the private ``redis-server`` (``server``; none when the
``frontier`` setting names a Redis already), opens the feeds and a Unix socket for
the workers' ``channel``, then keeps ``processes`` workers (``worker``) running in
one ``TaskGroup``: a worker that dies (``kill -9``) has its leases given back at
once and is started again, at most ``RESTARTS`` times per place. A stop (SIGINT,
SIGTERM) is sent on to every worker as SIGTERM. The counters of every worker that
ever ran add up to the crawl's (``Stats.merge``); with a ``state_dir`` they are kept
in the server beside the queue, so a resumed crawl counts on, and a finished one is
not crawled again.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import shutil
import signal
import sys
import time
import uuid
from dataclasses import asdict
from pathlib import Path
from typing import IO, Any

import structlog

from netdisco import logs
from netdisco.crawl.feeds import feed_pipelines
from netdisco.crawl.feeds.pipeline import FeedPipeline
from netdisco.crawl.lifecycle import TERMINAL, Phase, SpiderState, allows
from netdisco.crawl.settings import Settings
from netdisco.crawl.stats import Rate, Stats
from netdisco.exceptions import ConfigError, StateDirError
from netdisco.frontiers import is_shared
from netdisco.frontiers.base import start_over_state_dir
from netdisco.frontiers.redis.leases import Client, Keys, text
from netdisco.frontiers.redis.options import RedisOptions, connect
from netdisco.frontiers.redis.owners import recover_engine
from netdisco.frontiers.redis.ownership import RedisMembers
from netdisco.frontiers.sqlite_store import DB_NAME, lock_directory
from netdisco.procs.channel import MAX_LINE, Sink, Worker
from netdisco.procs.server import PrivateRedis, die_with_parent, run_directory
from netdisco.procs.worker import WorkerConfig

log = structlog.get_logger(__name__)

#: how many times a worker that died is started again, per place
RESTARTS = 3
#: seconds between two stores of the counters (``state_dir``): what a kill -9 of the
#: crawl may leave uncounted
STORE_INTERVAL = 0.5
#: how long a worker counts as a member before its own first beat (ms): ample for it to
#: start; one that dies sooner is removed at once (``ProcessCrawl._recover``)
WORKER_START_MS = 30_000


class ProcessCrawl:
    """One crawl on ``settings.processes`` worker processes; see the module docstring."""

    def __init__(self, args: argparse.Namespace, name: str, settings: Settings) -> None:
        if any(spec.format == "warc" for spec in settings.feeds):
            raise ConfigError("processes", "a warc feed is written by one process: use -j 1")
        self.args, self.name, self.settings = args, name, settings
        self.phase = Phase(name)
        self.stats = Stats()
        self.feeds: list[FeedPipeline] = feed_pipelines(
            settings.feeds, spider=name, engine=None, warc_max_size=settings.warc_max_size
        )
        self.sink = Sink(self.feeds)
        self.run_id = uuid.uuid4().hex[:12]
        self.count = min(settings.processes, settings.max_pages or settings.processes)
        self.processes: dict[int, asyncio.subprocess.Process] = {}
        self._owners: dict[str, Worker] = {}
        self._closed: dict[str, asyncio.Event] = {}
        self._stored: dict[str, Any] = {}  # counters of earlier runs of this state_dir
        self.already_finished: str | None = None  # how to crawl again a finished state_dir
        self._rate, self._counted = Rate(), 0
        self._failed = False  # a worker ended failed, or was given up
        self._redis: PrivateRedis | None = None
        self._client: Client | None = None
        self._lock: IO[str] | None = None

    @property
    def state(self) -> SpiderState:
        """Where the crawl is in its life (its ``Phase``)."""
        return self.phase.state

    @property
    def state_dir(self) -> Path | None:
        """Where the private server keeps the crawl (None: a crawl that cannot resume)."""
        return Path(self.settings.state_dir) if self.settings.state_dir else None

    async def stop(self) -> None:
        """Stop every worker gracefully (SIGTERM): they hand their leases back and end."""
        if not allows(self.state, "stop"):  # not begun, or ending already
            return
        self.phase.move("stop")
        for process in self.processes.values():
            if process.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    process.send_signal(signal.SIGTERM)

    async def run(self) -> None:
        """Crawl to the end (or the stop), then close everything that was started."""
        run_dir = run_directory()
        self.phase.move("start")
        try:
            url = await self._open(run_dir)
            if not self._stored.get("finished"):
                await self._crawl(url, run_dir)
        finally:
            await self._close()
            if self.state not in TERMINAL:  # it could not open, or its crawl raised
                self.phase.end(SpiderState.FAILED)
            shutil.rmtree(run_dir, ignore_errors=True)
        log.info("spider_closed", state=self.state.value, processes=self.count,
                 duplicate_pages=self.sink.duplicates, **self.stats.closing())  # fmt: skip

    async def _open(self, run_dir: Path) -> str:
        """The frontier URL the workers share: the private server's, or the setting's."""
        for feed in self.feeds:
            feed.prepare()
        url = self.settings.frontier
        if not is_shared(url):
            if self.state_dir is not None:
                self._take_state_dir(self.state_dir)
            self._redis = PrivateRedis(run_dir, self.state_dir)
            await self._redis.start()
            url = self._redis.url
        options = RedisOptions.from_url(url)
        self._client = connect(options.url, socket_timeout=10.0)
        await self._resume(options)
        for feed in self.feeds:
            await feed.open()
        return url

    def _take_state_dir(self, directory: Path) -> None:
        """Ours alone, and not a ``-j 1`` crawl's (SQLite) state."""
        self._lock = lock_directory(directory)
        if (directory / DB_NAME).exists():
            raise StateDirError(
                directory, f"holds a -j 1 crawl ({DB_NAME}): resume it with -j 1, or use another"
            )

    async def _resume(self, options: RedisOptions) -> None:
        """A stored crawl: its counters, and the leases of workers killed with it go back."""
        assert self._client is not None
        if self._redis is None or self.state_dir is None:
            return
        raw = await self._client.get(self._totals_key())
        self._stored = json.loads(raw) if raw else {}
        if self._stored.get("finished"):  # counters left at zero: this run fetches nothing
            self.phase.end(SpiderState.FINISHED)
            self.already_finished = start_over_state_dir(self.state_dir)
            log.warning("crawl_already_finished", state_dir=str(self.state_dir),
                        to_crawl_again=self.already_finished)  # fmt: skip
        else:
            self.stats.merge([self._stored.get("stats", {})])
        for owner in sorted(await self._last_workers(options.prefix)):
            counts = await recover_engine(self._client, options.prefix, owner)
            log.info("leases_recovered", owner=owner, count=sum(counts.values()))

    async def _last_workers(self, prefix: str) -> set[str]:
        """The workers of the run before (killed with it): those that hold leases, in
        the crawl's keys or its buckets', and the members that may hold buckets."""
        assert self._client is not None
        found = {text(m) for m in await self._client.zrange(Keys(prefix, self.name).members, 0, -1)}
        async for key in self._client.scan_iter(match=f"{prefix}:{{{self.name}[}}#]*:owned:*"):
            found.add(text(key).rpartition(":owned:")[2])
        return found

    def _totals_key(self) -> str:
        return f"netdisco:procs:{self.name}"

    async def _crawl(self, url: str, run_dir: Path) -> None:
        socket = run_dir / "crawl.sock"
        server = await asyncio.start_unix_server(self._serve, path=socket, limit=MAX_LINE)
        if self.phase.stopping:  # stopped while it opened
            server.close()
            self.phase.end(SpiderState.STOPPED)
            return
        self.phase.move("opened")
        self.stats.restart_clock()
        self._rate = self.stats.pages  # pages/s of the crawl: every worker's pages
        log.info("processes_started", processes=self.count, frontier=url.partition("?")[0])
        try:
            async with asyncio.TaskGroup() as group:
                ticker = group.create_task(self._tick())
                places = [
                    group.create_task(self._place(index, url, str(socket)))
                    for index in range(self.count)
                ]
                await asyncio.wait(places)
                ticker.cancel()
        finally:
            server.close()
        self.phase.end(self._end_state())

    def _end_state(self) -> SpiderState:
        if self.phase.stopping:
            return SpiderState.STOPPED
        return SpiderState.FAILED if self._failed else SpiderState.FINISHED

    async def _place(self, index: int, url: str, socket: str) -> None:
        """Keep worker ``index`` running until it ends; a dead one is started again."""
        for attempt in range(RESTARTS + 1):
            owner = f"{self.run_id}-{index}-{attempt}"
            self._closed[owner] = asyncio.Event()
            await self._member(owner)
            process = self.processes[index] = await self._spawn(index, owner, url, socket)
            await _relay(process)
            code = await process.wait()
            with contextlib.suppress(TimeoutError):  # its last messages, read to the end
                await asyncio.wait_for(self._closed[owner].wait(), 5.0)
            worker = self._owners.get(owner)
            if code in (0, 1) and worker is not None and worker.state is not None:
                self._failed |= worker.state == SpiderState.FAILED.value
                return
            log.warning("worker_died", worker=index, owner=owner, exit_code=code)
            await self._recover(owner, worker)
            if self.phase.stopping:
                return
        log.error("worker_given_up", worker=index, restarts=RESTARTS)
        self._failed = True

    def _options(self) -> RedisOptions:
        """The workers' frontier: the private server's, or the setting's."""
        return RedisOptions.from_url(self._redis.url if self._redis else self.settings.frontier)

    async def _member(self, owner: str) -> None:
        """Make the worker ``owner`` a member of the crawl before it starts: every worker's
        first settle then sees them all, and no host moves as they come up one by one
        (a move costs its host a robots.txt fetch and a rest). Its own beat takes over;
        a worker that dies first is removed by ``_recover``."""
        assert self._client is not None
        prefix = self._options().prefix
        members = RedisMembers(self._client, prefix, self.name, owner, ttl_ms=WORKER_START_MS)
        await members.beat()

    async def _recover(self, owner: str, worker: Worker | None) -> None:
        """A dead worker: its leases back in the queue now, its unfinished pages dropped."""
        if worker is not None:
            self.sink.lost(worker)
        assert self._client is not None
        counts = await recover_engine(self._client, self._options().prefix, owner)
        log.info("leases_recovered", owner=owner, count=sum(counts.values()))

    async def _spawn(
        self, index: int, owner: str, url: str, socket: str
    ) -> asyncio.subprocess.Process:
        share, extra = divmod(self.settings.max_pages, self.count)
        config = WorkerConfig(
            spider=self.args.spider,
            arg=list(self.args.arg),
            set=list(self.args.set),
            config=self.args.config,
            frontier=url,
            owner=owner,
            socket=socket,
            max_pages=share + (1 if index < extra else 0),
            feeds=bool(self.feeds),
            log_json=bool(self.args.log_json_effective),
            log_level=str(self.args.log_level),
        )
        return await asyncio.create_subprocess_exec(
            sys.executable, "-m", "netdisco.procs.worker", json.dumps(asdict(config)),
            stdin=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,  # its log lines: see _relay
            limit=MAX_LINE,
            start_new_session=True,  # Ctrl-C is ours: we send it on as SIGTERM
            preexec_fn=lambda: die_with_parent(signal.SIGKILL),
        )  # fmt: skip

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """One worker's connection: its messages in order, until it closes."""
        worker = Worker()
        self.sink.workers.append(worker)
        try:
            while line := await reader.readline():
                if not line.endswith(b"\n"):
                    break  # cut short: the worker died writing it
                await self.sink.handle(worker, json.loads(line), writer)
                if worker.owner and worker.owner not in self._owners:
                    self._owners[worker.owner] = worker
        except (ValueError, ConnectionError) as exc:  # a broken worker: it is ended
            log.error("worker_message_refused", owner=worker.owner, error=repr(exc))
        finally:
            writer.close()
            if worker.owner in self._closed:
                self._closed[worker.owner].set()

    def _merge(self) -> None:
        """The crawl's counters: the stored runs' and every worker's that ever ran."""
        started = self.stats.started
        self.stats.merge([self._stored.get("stats", {}), *(w.snapshot for w in self.sink.workers)])
        self.stats.started = started
        self._rate.add(max(0, self.stats.succeeded - self._counted))
        self._counted = self.stats.succeeded

    async def _tick(self) -> None:
        """Counters twice a second, the progress line, the stored counters."""
        last_line = last_store = time.monotonic()
        while True:
            await asyncio.sleep(0.5)
            self._merge()
            now = time.monotonic()
            interval = self.settings.progress_interval
            if interval and now - last_line >= interval:
                last_line = now
                self._progress()
            if now - last_store >= STORE_INTERVAL:
                last_store = now
                await self._store(finished=False)

    def workers_running(self) -> int:
        """How many worker processes run now."""
        return sum(p.returncode is None for p in self.processes.values())

    def _progress(self) -> None:
        """One progress line for the whole crawl (the workers write none)."""
        log.info(
            "progress",
            pages=self.stats.succeeded,
            pages_per_second=round(self._rate.per_second(5), 1),
            queue=self.stats.queue_size,
            in_flight=self.stats.in_flight,
            workers=self.workers_running(),
        )

    async def _store(self, *, finished: bool) -> None:
        """Keep the counters (and whether the crawl finished) beside a ``state_dir``'s queue."""
        if self._client is None or self._redis is None or self.state_dir is None:
            return
        stats = {k: v for k, v in self.stats.snapshot().items() if k != "hosts"}  # a gauge
        data = {"stats": stats, "finished": finished}
        await self._client.set(self._totals_key(), json.dumps(data))

    async def _close(self) -> None:
        """Feeds, stored counters, the server and the lock, each whatever the others did."""
        for feed in self.feeds:
            with contextlib.suppress(Exception):
                await feed.close()
        opened = self.state not in (SpiderState.IDLE, SpiderState.STARTING)
        if opened and not self._stored.get("finished"):
            self._merge()
            with contextlib.suppress(Exception):
                await self._store(finished=self.state is SpiderState.FINISHED)
        if self._client is not None:
            await self._client.aclose()
        if self._redis is not None:
            await self._redis.stop()
        if self._lock is not None:
            self._lock.close()


async def _relay(process: asyncio.subprocess.Process) -> None:
    """Copy a worker's log lines to our standard error, each line whole (a logging handler
    writes a line in two calls, so workers sharing one stderr would split each other's).
    Written as text to the log's output of the moment (a Scrapy project's LOG_FILE, or
    stderr, where the live display prints it above itself)."""
    assert process.stderr is not None
    while True:
        try:
            line = await process.stderr.readline()
        except ValueError:  # a line longer than MAX_LINE: passed on in pieces
            line = await process.stderr.read(MAX_LINE)
        if not line:
            return
        err = logs.output()
        err.write(line.decode(errors="replace") + ("" if line.endswith(b"\n") else "\n"))
        err.flush()
