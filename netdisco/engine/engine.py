"""SpiderEngine: several spiders in one event loop, their lifecycle, and their status.

Each spider runs in its own ``Crawler`` (data-flow steps 1-5, ``docs/architecture.md``);
the engine is step 6: it owns the crawlers, serves them over HTTP through an
``HttpFront`` (``netdisco.engine.sidecar.default_front``: in the loop or a child) and keeps its
ZooKeeper node current through a ``Registry``. It lives in the caller's loop
and keeps no global state, so an application can embed one, or two::

    async with SpiderEngine(EngineSettings(port=0)) as engine:
        engine.add_spider(Quotes)
        await engine.run()
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from collections.abc import Callable, Coroutine, Iterable, Mapping, Sequence
from functools import partial
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

import structlog

from netdisco import logs
from netdisco._fence import Fence
from netdisco._tasks import Tasks
from netdisco._version import __version__
from netdisco.cluster.contract import EnginePayload, NodeState, SpiderSummary
from netdisco.crawl.arguments import make_spider
from netdisco.crawl.crawler import TERMINAL, Crawler, PushResult, SpiderState
from netdisco.crawl.lifecycle import allows
from netdisco.engine.config import EngineConfig, EngineSettings, check_exposure
from netdisco.engine.facts import NodeFacts
from netdisco.engine.hosted import (
    FrontFactory,
    HttpFront,
    LeaseKeepers,
    Registry,
    RegistryFactory,
    ThreadSafeMarks,
    run_claim,
    zookeeper_registry,
    zookeeper_settings,
)
from netdisco.engine.lifecycle import EngineState
from netdisco.engine.ondemand import CrawlHandle, on_demand
from netdisco.engine.schedules import ScheduledSpider, Timetable
from netdisco.engine.sidecar import default_front
from netdisco.engine.watchdog import LoopWatchdog
from netdisco.exceptions import DuplicateSpider, InvalidTransition, UnknownSpider

if TYPE_CHECKING:
    from netdisco.cluster.ticks import Schedule
    from netdisco.crawl.pipelines import Pipeline
    from netdisco.crawl.settings import Settings
    from netdisco.crawl.spider import Spider
    from netdisco.engine.jobs import JobRunner

log = structlog.get_logger(__name__)

T = TypeVar("T")
#: a scheduled spider's next run is built from: the spider (class or object), settings, pipelines
Recipe = tuple[
    "Spider | type[Spider]",
    "Settings | Mapping[str, Any] | None",
    "tuple[Pipeline, ...]",
    "Mapping[str, str]",
]


class SpiderEngine:
    """Runs spiders, controls their lifecycle, serves their status, registers itself."""

    def __init__(
        self,
        settings: EngineSettings | None = None,
        *,
        zookeeper: Mapping[str, Any] | None = None,
        registry_factory: RegistryFactory | None = None,
        http_front: FrontFactory = default_front,
    ) -> None:
        logs.as_library()  # in an application that set up logging: its handlers and levels
        self.settings = settings or EngineSettings()
        self._zookeeper = zookeeper_settings(zookeeper) if zookeeper is not None else None
        self.fence = Fence() if registry_factory is None and self._zookeeper else None  # leases
        if self.fence is not None and self._zookeeper is not None:
            registry_factory = zookeeper_registry(self._zookeeper, self.settings.token, self.fence)
        self._registry_factory = registry_factory
        self.registry: Registry | None = None
        self.state = EngineState.CREATED
        #: new for every engine object; labels this run's node and its leases in Redis
        self.incarnation = uuid.uuid4().hex
        self._leases = LeaseKeepers(self._zookeeper, self.incarnation)
        self.started_at: float | None = None
        self.port: int = self.settings.port
        self._crawlers: dict[str, Crawler] = {}
        self._tasks, self._starting = Tasks(), Tasks()  # stops and ticks; spiders opening
        self._changed, self._stopped = asyncio.Event(), asyncio.Event()  # any change; the end
        self._front_factory = http_front
        self._http: HttpFront | None = None
        self._stopping: asyncio.Task[None] | None = None
        self._listeners: list[Callable[[SpiderEngine], None]] = []
        self._timetable = Timetable()
        self._recipes: dict[str, Recipe] = {}  # how to rebuild a scheduled spider each run
        self.jobs: JobRunner | None = None  # with ZooKeeper and max_jobs: jobs as children
        self.watchdog = LoopWatchdog(
            self.settings.loop_stall,
            self.settings.loop_stall_drop,
            on_stall=self._stalled_from_thread,
            on_drop=self._drop_from_thread,
            on_back=lambda _lag: self._notify(),
        )
        self.facts = NodeFacts(self._fact_directories)

    @classmethod
    def from_config(cls, config: EngineConfig) -> SpiderEngine:
        """An engine with every spider the configuration lists; errors name the key."""
        from netdisco.engine.launch import add_configured  # imports user code: only when asked

        engine = cls(config.engine, zookeeper=config.zookeeper)
        add_configured(engine, config)
        return engine

    # -- identity --------------------------------------------------------------------

    @property
    def id(self) -> str:
        """Stable across restarts: configured, or host name and (bound) port."""
        return self.settings.default_id(self.port)

    @property
    def status_url(self) -> str:
        """Where other machines read this engine's status (``advertise_url`` says where an
        application serves the engine's routes under a prefix of its own)."""
        return f"{self.settings.advertised_base(self.port)}/netdiscovery/engine"

    @property
    def registry_healthy(self) -> bool | None:
        """None when standalone, else whether the registration is healthy."""
        return None if self.registry is None else self.registry.healthy

    @property
    def registry_said(self) -> str:
        """The registration in a few words: ``standalone``, ``registered``, or why not
        (``unregistered: ZooKeeper HOST:PORT unreachable since ...``)."""
        if self.registry is None:
            return "standalone"
        if self.registry.healthy:
            return "registered"
        return str(self.registry.status().get("detail") or "unregistered")

    def describe(self) -> EnginePayload:
        """The identity data written into the engine's znode (never a secret)."""
        return EnginePayload(
            id=self.id,
            incarnation=self.incarnation,
            host=self.settings.advertised_host,
            port=self.settings.advertised_port(self.port),
            status_url=self.status_url,
            pid=os.getpid(),
            version=__version__,
            started_at=self.started_at,
            spiders=tuple(self._node_entry(c) for c in self._crawlers.values()),
            state=NodeState.RUNNING,
            max_jobs=None if self.jobs is None else self.settings.max_jobs,
            labels=self.settings.label_map,
            jobs=() if self.jobs is None else tuple(self.jobs.running),
            job_spiders={} if self.jobs is None else self.jobs.offered,
            job_stats={} if self.jobs is None else self.jobs.counters(),
            stalled=self.watchdog.stalled,
            loop_lag=self.watchdog.lag,
            facts=self.facts.current,
        )

    def _node_entry(self, crawler: Crawler) -> SpiderSummary:
        return SpiderSummary(
            name=crawler.name,
            state=str(crawler.state),
            next_run=self._timetable.next_run(crawler.name),
            pages=crawler.stats.succeeded,
            items=crawler.stats.items,
            failed=crawler.failures.kept,
            crawl=crawler.crawl,
        )

    def spider_status(self, name: str) -> dict[str, Any]:
        """A spider's status object, with its schedule when it has one."""
        return {**self.crawler(name).status(), **self._timetable.status(name)}

    # -- spiders ---------------------------------------------------------------------

    def crawlers(self) -> list[Crawler]:
        """The engine's crawlers, in the order they were added."""
        return list(self._crawlers.values())

    def crawler(self, name: str) -> Crawler:
        """One crawler by spider name; ``UnknownSpider`` if there is none."""
        try:
            return self._crawlers[name]
        except KeyError:
            raise UnknownSpider(name) from None

    def add_spider(
        self,
        spider: Spider | type[Spider],
        settings: Settings | Mapping[str, Any] | None = None,
        *,
        pipelines: Sequence[Pipeline] = (),
        schedule: Schedule | None = None,
        args: Mapping[str, str] | None = None,
        keep_alive: bool = False,
    ) -> Crawler:
        """Add a spider; it starts at once if the engine runs (a scheduled one at its tick).

        ``keep_alive``: out of work, the spider waits for ``push``es instead of finishing,
        until ``finish(name)`` (or a stop); the engine's ``run()`` waits for it meanwhile.

        ``settings`` is a ``Settings`` (the values that differ from the defaults count), or
        a mapping (``{"max_pages": 5}``) loaded like a ``[[spiders]]`` table; either goes
        over the spider's ``custom_settings``, as every entry point merges them. ``args``
        (checked by the caller) go to a spider class as ``-a`` does (``make_spider``).
        """
        if self.state in (EngineState.STOPPING, EngineState.STOPPED):
            raise RuntimeError(f"engine {self.id!r} is {self.state}; it takes no new spiders")
        args = dict(args or {})
        instance = make_spider(spider, args) if isinstance(spider, type) else spider
        if instance.name in self._crawlers:
            raise DuplicateSpider(instance.name)
        crawler = self._new_crawler(instance, settings, pipelines)
        crawler.keep_alive = keep_alive
        log.debug("spider_added", engine=self.id, spider=crawler.name)
        if schedule is not None:
            claim = run_claim(crawler.settings.frontier, crawler.name, self.incarnation)
            start_run = partial(self._scheduled_run, crawler.name)
            self._timetable.add(ScheduledSpider(crawler.name, schedule, start_run, claim))
            self._recipes[crawler.name] = (spider, settings, tuple(pipelines), args)
        if self.state is EngineState.RUNNING:
            self._begin(crawler)
        self._notify()
        return crawler

    def remove_spider(self, name: str) -> None:
        """Forget a spider that is done (or waits for its next scheduled run)."""
        crawler = self.crawler(name)
        waiting = crawler.state is SpiderState.IDLE and name in self._timetable
        if crawler.state not in TERMINAL and not waiting:
            raise InvalidTransition(name, str(crawler.state), "delete")
        self._timetable.remove(name)
        self._recipes.pop(name, None)
        del self._crawlers[name]
        log.info("spider_removed", engine=self.id, spider=name)
        self._notify()

    async def launch(self, body: Any) -> Crawler:
        """``POST /netdiscovery/spiders``: a spider from an allowed module, checked first."""
        from netdisco.engine.launch import from_body  # imports user code: only when asked

        spec = from_body(body, self.settings, self.id)
        current = self._crawlers.get(spec.name)
        if current is not None and current.state in TERMINAL and spec.name not in self._timetable:
            self.remove_spider(spec.name)  # a finished run gives way to the new one
        return self.add_spider(spec.spider(), spec.settings, schedule=spec.schedule, args=spec.args)

    def add_listener(self, callback: Callable[[SpiderEngine], None]) -> None:
        """Call ``callback(engine)`` whenever a spider is added or changes state."""
        self._listeners.append(callback)

    def pause(self, name: str) -> SpiderState:
        """Stop dispatching ``name``'s requests; in-flight ones finish."""
        return self.crawler(name).pause()

    def resume(self, name: str) -> SpiderState:
        """Dispatch ``name``'s requests again."""
        return self.crawler(name).resume()

    async def stop_spider(self, name: str, deadline: float | None = None) -> SpiderState:
        """Stop one spider; shielded so a caller that goes away cannot cut it short."""
        crawler = self.crawler(name)
        task = self._spawn(crawler.stop(deadline))
        return await asyncio.shield(task)

    async def push(self, name: str, urls: Iterable[str]) -> PushResult:
        """Schedule more URLs on a spider; each rejected one comes back with a reason."""
        return await self.crawler(name).push(urls)

    def finish(self, name: str) -> None:
        """Let a ``keep_alive`` spider end: it finishes once what it has queued is done."""
        self.crawler(name).keep_alive = False

    def crawl(
        self,
        spider: type[Spider],
        urls: Iterable[str],
        settings: Settings | Mapping[str, Any] | None = None,
        *,
        pipelines: Sequence[Pipeline] = (),
        args: Mapping[str, str] | None = None,
        keep: bool = False,
    ) -> CrawlHandle:
        """Crawl ``urls`` with a run of its own of ``spider`` (a class); ``await`` the
        handle for a ``CrawlResult`` with this call's items only (``netdisco.engine.ondemand``).
        Safe to call many times, at once; the engine must be created or running."""
        return on_demand(self, spider, urls, settings, pipelines, args, keep)

    # -- lifecycle -------------------------------------------------------------------

    async def start(self) -> None:
        """Serve HTTP, register, and start every spider added so far."""
        if self.state is not EngineState.CREATED:
            raise RuntimeError(f"engine {self.id!r} is {self.state}; it can start only once")
        check_exposure(self.settings)
        self.state = EngineState.RUNNING
        self.started_at = time.time()
        self.watchdog.start()
        self._tasks.spawn(self.facts.run(self._facts_changed), name="node-facts")
        try:
            if self.settings.http:
                self._http = self._front_factory(self)
                self.port = await self._http.start(self.settings.host, self.settings.port)
            if self._registry_factory is not None:
                self._say_where()
                self.registry = self._registry_factory(self.id, self.describe)
                await self.registry.start()
            await self._start_jobs()
            for crawler in self.crawlers():
                if crawler.name in self._timetable:
                    self._timetable.keep(crawler.name, self._spawn, self._notify)
                elif crawler.state is SpiderState.IDLE:
                    await self._leases.ensure(crawler.settings.frontier)
                    await crawler.start()
        except BaseException:
            await self.stop()
            raise
        log.info("engine_started", engine=self.id, port=self.port, spiders=len(self._crawlers))

    def _say_where(self) -> None:
        """An engine whose routes an application serves (``http = false``) cannot know
        where: without ``advertise_url`` its node names a port nothing may serve."""
        if not self.settings.http and self.settings.advertise_url is None:
            log.warning(
                "engine_address_unknown",
                engine=self.id,
                status_url=self.status_url,
                hint="set EngineSettings(advertise_url=...) to where the app mounts the routes",
            )

    async def _start_jobs(self) -> None:
        """With ZooKeeper and ``max_jobs``: take jobs placed on this engine (children)."""
        if self._zookeeper is None or self.settings.max_jobs <= 0:
            return
        from netdisco.engine.jobs import JobRunner  # kazoo only when configured

        self.jobs = JobRunner(
            self.settings, self._zookeeper, self.incarnation, lambda: self.id, self._notify
        )
        if self.settings.job_frontier is not None:  # a lost engine's jobs' leases come back
            await self._leases.ensure(self.settings.job_frontier)
        await self.jobs.start()

    async def wait(self) -> dict[str, SpiderState]:
        """Until every spider has finished, stopped or failed (spiders added meanwhile too).

        An engine with scheduled spiders is never done: it waits until it is stopped.
        """
        if self.state is EngineState.CREATED and self._crawlers:
            raise RuntimeError(f"engine {self.id!r} has not started; call start() or run()")
        while True:
            self._changed.clear()
            if self.state is EngineState.STOPPED or (
                not self._timetable and all(c.state in TERMINAL for c in self._crawlers.values())
            ):
                return {name: c.state for name, c in self._crawlers.items()}
            await self._changed.wait()

    async def run(self) -> dict[str, SpiderState]:
        """Start, wait until every spider is done, stop; the final state of each spider.

        However it ends, it ends as ``stop()`` does: a cancelled ``run()`` (the
        ``create_task(engine.run())`` / ``task.cancel()`` pattern, Ctrl-C under
        ``asyncio.run``) or one whose wait raised first leaves the cluster gracefully
        (tombstone) and closes everything, then re-raises.
        """
        try:
            if self.state is EngineState.CREATED:
                await self.start()
            states = await self.wait()
        except BaseException:
            await self._stop_regardless()
            raise
        await self.stop()
        return states

    async def _stop_regardless(self) -> None:
        """``stop()`` to the end even when our task is cancelled again meanwhile (the
        stop is shielded; a second cancel only makes us wait for it once more)."""
        while True:
            try:
                await self.stop()
                return
            except asyncio.CancelledError:
                if self._stopping is None or self._stopping.done():
                    raise

    async def stop(self, deadline: float | None = None) -> None:
        """Deregister first, then stop every spider (in-flight get ``deadline`` s), then HTTP.

        Safe to call twice or concurrently: later callers wait for the first.
        """
        if self.state is EngineState.CREATED:
            self.state = EngineState.STOPPED
            self._stopped.set()
            return
        if self._stopping is None:
            self._stopping = asyncio.create_task(self._shutdown(deadline))
        await asyncio.shield(self._stopping)

    async def stopped(self) -> None:
        """Return once the engine has stopped (at once if it has)."""
        await self._stopped.wait()

    async def __aenter__(self) -> SpiderEngine:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    # -- internals -------------------------------------------------------------------

    async def _shutdown(self, deadline: float | None) -> None:
        self.state = EngineState.STOPPING
        log.info("engine_stopping", engine=self.id)
        await self.watchdog.stop()
        if self.registry is not None:
            try:
                await self.registry.stop()
            except Exception as exc:  # the crawl must still drain and close its pipelines
                log.warning("registry_stop_failed", engine=self.id, error=repr(exc))
        if self.jobs is not None:
            await self.jobs.stop()
        await self._timetable.stop()  # no tick starts a run once the stop has begun
        await self._starting.cancel_all()  # a spider still opening its frontier must not start
        await asyncio.gather(*(self._stop_crawler(c, deadline) for c in self.crawlers()))
        await self._leases.stop()
        await self._tasks.cancel_all()
        if self._http is not None:
            await self._http.stop()
        self.state = EngineState.STOPPED
        self._changed.set()
        self._stopped.set()
        states = {name: str(c.state) for name, c in self._crawlers.items()}
        log.info("engine_stopped", engine=self.id, spiders=states)

    async def _stop_crawler(self, crawler: Crawler, deadline: float | None) -> None:
        try:
            if allows(crawler.state, "stop"):  # also one still opening: closed once open
                await crawler.stop(deadline)
            elif crawler.state is SpiderState.STOPPING:
                await crawler.wait()
        except Exception as exc:  # one spider's failure must not keep the others running
            log.error("spider_stop_failed", engine=self.id, spider=crawler.name, error=repr(exc))

    async def _start_crawler(self, crawler: Crawler) -> None:
        if crawler.state is not SpiderState.IDLE:  # start() got to it first
            return
        try:
            await self._leases.ensure(crawler.settings.frontier)
            await crawler.start()
        except Exception as exc:
            log.error("spider_start_failed", engine=self.id, spider=crawler.name, error=repr(exc))

    def _new_crawler(
        self,
        spider: Spider,
        settings: Settings | Mapping[str, Any] | None,
        pipelines: Sequence[Pipeline],
    ) -> Crawler:
        crawler = Crawler(
            spider, settings, pipelines=pipelines, owner=self.incarnation, engine=self.id
        )
        crawler.frontier.fence = self.fence
        crawler.add_listener(self._on_spider_changed)
        self._crawlers[crawler.name] = crawler
        return crawler

    def _begin(self, crawler: Crawler) -> None:
        """A spider added while the engine runs: keep its schedule, or start it now."""
        if crawler.name in self._timetable:
            self._timetable.keep(crawler.name, self._spawn, self._notify)
            return
        self._starting.spawn(self._start_crawler(crawler), name=f"start:{crawler.name}")

    async def _scheduled_run(self, name: str, tick: float) -> bool:
        """A tick: a new run of ``name`` (its id the tick's), unless the previous one goes on."""
        crawler = self._crawlers[name]
        if crawler.state in TERMINAL:
            spider, settings, pipelines, args = self._recipes[name]
            instance = make_spider(spider, args) if isinstance(spider, type) else spider
            crawler = self._new_crawler(instance, settings, pipelines)
        elif crawler.state is not SpiderState.IDLE:
            return False
        crawler.run_id = f"tick-{round(tick * 1000)}"  # the same on every engine of the crawl
        await self._leases.ensure(crawler.settings.frontier)
        await crawler.start()
        self._notify()
        return True

    def _fact_directories(self) -> dict[str, str]:
        """The directories whose free space the node reports: feeds, and each state_dir."""
        found = {"feeds": self.settings.feeds_dir} if self.settings.feeds_dir else {}
        states = dict.fromkeys(c.settings.state_dir for c in self._crawlers.values())
        for index, path in enumerate(p for p in states if p):
            found["state" if index == 0 else f"state{index + 1}"] = path
        return found

    def _facts_changed(self) -> None:
        if self.registry is not None:
            self.registry.data_changed()

    def _stalled_from_thread(self, lag: float) -> None:
        """The watchdog thread, loop blocked: say so in the znode (``mark_from_thread``)."""
        if isinstance(self.registry, ThreadSafeMarks):
            self.registry.mark_from_thread({"stalled": True, "loop_lag": round(lag, 3)})

    def _drop_from_thread(self) -> None:
        """The watchdog thread, loop blocked past ``loop_stall_drop``: give up the znode."""
        if isinstance(self.registry, ThreadSafeMarks):
            self.registry.drop_from_thread()

    def _spawn(self, coro: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
        return self._tasks.spawn(coro)

    def _on_spider_changed(self, crawler: Crawler) -> None:
        log.info("spider_state", engine=self.id, spider=crawler.name, state=str(crawler.state))
        self._notify()

    def _notify(self) -> None:
        self._changed.set()
        if self.registry is not None:
            self.registry.data_changed()
        for callback in self._listeners:
            callback(self)
