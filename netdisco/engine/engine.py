"""SpiderEngine: several spiders in one event loop, their lifecycle, and their status.

Each spider runs in its own ``Crawler`` (data-flow steps 1-5 of DESIGN.md); the
engine is step 6: it owns the crawlers, serves them over HTTP (``netdisco.engine.api``)
and keeps its ZooKeeper node current through a ``Registry``. It lives inside the
caller's running loop and keeps no global state, so an application can embed
one, or two, next to its own tasks::

    async with SpiderEngine(EngineSettings(port=0)) as engine:
        engine.add_spider(Quotes)
        await engine.run()
"""

from __future__ import annotations

import asyncio
import enum
import os
import time
import uuid
from collections.abc import Callable, Coroutine, Iterable, Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import structlog

from netdisco._version import __version__
from netdisco.cluster.contract import EnginePayload, NodeState, SpiderSummary
from netdisco.crawl.crawler import TERMINAL, Crawler, PushResult, SpiderState
from netdisco.engine.api import HttpEndpoint
from netdisco.engine.config import EngineConfig, EngineSettings, is_loopback
from netdisco.exceptions import ConfigError, DuplicateSpider, SpiderLoadError, UnknownSpider

if TYPE_CHECKING:
    from netdisco.cluster.settings import ZooKeeperSettings
    from netdisco.crawl.pipelines import Pipeline
    from netdisco.crawl.settings import Settings
    from netdisco.crawl.spider import Spider

log = structlog.get_logger(__name__)

T = TypeVar("T")


class Registry(Protocol):
    """What the engine needs from its cluster registration (``netdisco.cluster.registry``)."""

    async def start(self) -> None: ...

    def data_changed(self) -> None: ...

    async def stop(self) -> None: ...

    @property
    def healthy(self) -> bool: ...

    def status(self) -> dict[str, Any]: ...


#: builds a registry from the engine id and the callable that describes the engine
RegistryFactory = Callable[[str, Callable[[], EnginePayload]], Registry]


class EngineState(enum.StrEnum):
    """The engine's own lifecycle: it runs once, then it is done."""

    CREATED = "created"
    RUNNING = "running"
    STOPPING = "stopping"
    STOPPED = "stopped"


def zookeeper_settings(table: Mapping[str, Any]) -> ZooKeeperSettings:
    """``[zookeeper]`` validated now, not at start (``NETDISCO_ZOOKEEPER_*`` win)."""
    from netdisco.cluster.settings import ZooKeeperSettings  # kazoo only when configured

    return ZooKeeperSettings.from_mapping(table, prefix="zookeeper", environ=os.environ)


def zookeeper_registry(settings: ZooKeeperSettings) -> RegistryFactory:
    """A factory for the engine's ZooKeeper registration."""
    from netdisco.cluster.registry import Registration  # kazoo only when configured

    def build(engine_id: str, describe: Callable[[], EnginePayload]) -> Registry:
        return Registration(settings, engine_id, describe)

    return build


class HttpFront(Protocol):
    """What the engine needs from its HTTP endpoint: bind, serve, close."""

    async def start(self, host: str, port: int) -> int:
        """Serve on ``host:port``; the port actually bound (0 picks one)."""
        ...

    async def stop(self) -> None:
        """Close the listener and idle connections."""
        ...


#: builds the HTTP front for an engine; ``HttpEndpoint`` is the default
FrontFactory = Callable[["SpiderEngine"], HttpFront]


class LeaseKeeper(Protocol):
    """Returns lost engines' leases in a shared frontier (``netdisco.frontiers.redis.recovery``)."""

    async def start(self) -> None: ...

    async def stop(self) -> None: ...


class SpiderEngine:
    """Runs spiders, controls their lifecycle, serves their status, registers itself."""

    def __init__(
        self,
        settings: EngineSettings | None = None,
        *,
        zookeeper: Mapping[str, Any] | None = None,
        registry_factory: RegistryFactory | None = None,
        http_front: FrontFactory = HttpEndpoint,
    ) -> None:
        self.settings = settings or EngineSettings()
        self._zookeeper = zookeeper_settings(zookeeper) if zookeeper is not None else None
        if registry_factory is None and self._zookeeper is not None:
            registry_factory = zookeeper_registry(self._zookeeper)
        self._registry_factory = registry_factory
        self.registry: Registry | None = None
        self.state = EngineState.CREATED
        #: new for every engine object; labels this run's node and its leases in Redis
        self.incarnation = uuid.uuid4().hex
        self._recoveries: dict[str, LeaseKeeper] = {}
        self._starting: set[asyncio.Task[None]] = set()  # spiders added while running
        self.started_at: float | None = None
        self.port: int = self.settings.port
        self._crawlers: dict[str, Crawler] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._changed = asyncio.Event()
        self._front_factory = http_front
        self._http: HttpFront | None = None
        self._stopping: asyncio.Task[None] | None = None
        self._listeners: list[Callable[[SpiderEngine], None]] = []

    @classmethod
    def from_config(cls, config: EngineConfig) -> SpiderEngine:
        """An engine with every spider the configuration lists; errors name the key."""
        from netdisco.crawl.loader import load_spider  # imports user code: only when asked

        engine = cls(config.engine, zookeeper=config.zookeeper)
        for entry in config.spiders:
            try:
                spider_class = load_spider(entry.spider)
            except SpiderLoadError as exc:
                raise ConfigError(f"{entry.key}.spider", str(exc)) from exc
            settings = entry.settings(spider_class.custom_settings)
            try:
                engine.add_spider(spider_class, settings)
            except DuplicateSpider as exc:
                raise ConfigError(f"{entry.key}.spider", str(exc)) from exc
        return engine

    # -- identity --------------------------------------------------------------------

    @property
    def id(self) -> str:
        """Stable across restarts: configured, or host name and (bound) port."""
        return self.settings.default_id(self.port)

    @property
    def status_url(self) -> str:
        """Where other machines read this engine's status."""
        return f"http://{self.settings.advertised_host}:{self.port}/netdiscovery/engine"

    @property
    def registry_healthy(self) -> bool | None:
        """None when standalone, else whether the registration is healthy."""
        return None if self.registry is None else self.registry.healthy

    def describe(self) -> EnginePayload:
        """The identity data written into the engine's znode (never a secret)."""
        return EnginePayload(
            id=self.id,
            incarnation=self.incarnation,
            host=self.settings.advertised_host,
            port=self.port,
            status_url=self.status_url,
            pid=os.getpid(),
            version=__version__,
            started_at=self.started_at,
            spiders=tuple(
                SpiderSummary(name=c.name, state=str(c.state)) for c in self._crawlers.values()
            ),
            state=NodeState.RUNNING,
        )

    def status(self) -> dict[str, Any]:
        """``GET /netdiscovery/engine``: identity, registry state and spider summaries."""
        return {
            **self.describe().to_dict(),
            "state": str(self.state),
            "registry": None if self.registry is None else self.registry.status(),
            "spiders": [_summary(c.status()) for c in self._crawlers.values()],
        }

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
        settings: Settings | None = None,
        *,
        pipelines: Sequence[Pipeline] = (),
    ) -> Crawler:
        """Add a spider; it starts at once if the engine is already running."""
        if self.state in (EngineState.STOPPING, EngineState.STOPPED):
            raise RuntimeError(f"engine {self.id!r} is {self.state}; it takes no new spiders")
        instance = spider() if isinstance(spider, type) else spider
        if instance.name in self._crawlers:
            raise DuplicateSpider(instance.name)
        crawler = Crawler(
            instance, settings, pipelines=pipelines, owner=self.incarnation, engine=self.id
        )
        crawler.add_listener(self._on_spider_changed)
        self._crawlers[crawler.name] = crawler
        log.info("spider_added", engine=self.id, spider=crawler.name)
        if self.state is EngineState.RUNNING:
            starting = self._spawn(self._start_crawler(crawler))
            self._starting.add(starting)
            starting.add_done_callback(self._starting.discard)
        self._notify()
        return crawler

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
        task = self._spawn(crawler.stop(self._deadline(deadline)))
        return await asyncio.shield(task)

    async def push(self, name: str, urls: Iterable[str]) -> PushResult:
        """Schedule more URLs on a spider; each rejected one comes back with a reason."""
        return await self.crawler(name).push(urls)

    # -- lifecycle -------------------------------------------------------------------

    async def start(self) -> None:
        """Serve HTTP, register, and start every spider added so far."""
        if self.state is not EngineState.CREATED:
            raise RuntimeError(f"engine {self.id!r} is {self.state}; it can start only once")
        self._check_exposure()
        self.state = EngineState.RUNNING
        self.started_at = time.time()
        try:
            if self.settings.http:
                await self._start_http()
            if self._registry_factory is not None:
                self.registry = self._registry_factory(self.id, self.describe)
                await self.registry.start()
            for crawler in self.crawlers():
                if crawler.state is SpiderState.IDLE:
                    await self._keep_leases(crawler)
                    await crawler.start()
        except BaseException:
            await self.stop()
            raise
        log.info("engine_started", engine=self.id, port=self.port, spiders=len(self._crawlers))

    async def wait(self) -> dict[str, SpiderState]:
        """Until every spider has finished, stopped or failed (spiders added meanwhile too)."""
        if self.state is EngineState.CREATED and self._crawlers:
            raise RuntimeError(f"engine {self.id!r} has not started; call start() or run()")
        while True:
            self._changed.clear()
            if self.state is EngineState.STOPPED or all(
                c.state in TERMINAL for c in self._crawlers.values()
            ):
                return {name: c.state for name, c in self._crawlers.items()}
            await self._changed.wait()

    async def run(self) -> dict[str, SpiderState]:
        """Start, wait until every spider is done, stop; the final state of each spider."""
        if self.state is EngineState.CREATED:
            await self.start()
        states = await self.wait()
        await self.stop()
        return states

    async def stop(self, deadline: float | None = None) -> None:
        """Deregister first, then stop every spider (in-flight get ``deadline`` s), then HTTP.

        Safe to call twice or concurrently: later callers wait for the first.
        """
        if self.state is EngineState.CREATED:
            self.state = EngineState.STOPPED
            return
        if self._stopping is None:
            self._stopping = asyncio.create_task(self._shutdown(deadline))
        await asyncio.shield(self._stopping)

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

    def _check_exposure(self) -> None:
        """Refuse unauthenticated control on an address other machines can reach."""
        s = self.settings
        if s.http and s.control and s.token is None and not is_loopback(s.host):
            raise ConfigError(
                "engine.token_env",
                f"control routes are enabled on {s.host!r}, which is not a loopback address, "
                f"but no token is set; put a token in ${s.token_env or 'NETDISCO_TOKEN'}, "
                "bind to 127.0.0.1, or set engine.control = false",
            )

    async def _start_http(self) -> None:
        self._http = self._front_factory(self)
        self.port = await self._http.start(self.settings.host, self.settings.port)

    async def _shutdown(self, deadline: float | None) -> None:
        self.state = EngineState.STOPPING
        log.info("engine_stopping", engine=self.id)
        if self.registry is not None:
            try:
                await self.registry.stop()
            except Exception as exc:  # the crawl must still drain and close its pipelines
                log.warning("registry_stop_failed", engine=self.id, error=repr(exc))
        starting = list(self._starting)  # a spider still opening its frontier must not start now
        for task in starting:
            task.cancel()
        await asyncio.gather(*starting, return_exceptions=True)
        await asyncio.gather(*(self._stop_crawler(c, deadline) for c in self.crawlers()))
        for keeper in self._recoveries.values():
            try:
                await keeper.stop()
            except Exception as exc:  # closing the others matters more
                log.warning("lease_recovery_stop_failed", engine=self.id, error=repr(exc))
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._http is not None:
            await self._http.stop()
        self.state = EngineState.STOPPED
        self._changed.set()
        log.info("engine_stopped", engine=self.id, spiders=self._final_states())

    async def _stop_crawler(self, crawler: Crawler, deadline: float | None) -> None:
        try:
            if crawler.state in (SpiderState.RUNNING, SpiderState.PAUSED):
                await crawler.stop(self._deadline(deadline))
            elif crawler.state is SpiderState.STOPPING:
                await crawler.wait()
        except Exception as exc:  # one spider's failure must not keep the others running
            log.error("spider_stop_failed", engine=self.id, spider=crawler.name, error=repr(exc))

    async def _start_crawler(self, crawler: Crawler) -> None:
        if crawler.state is not SpiderState.IDLE:  # start() got to it first
            return
        try:
            await self._keep_leases(crawler)
            await crawler.start()
        except Exception as exc:
            log.error("spider_start_failed", engine=self.id, spider=crawler.name, error=repr(exc))

    async def _keep_leases(self, crawler: Crawler) -> None:
        """With a shared frontier and ZooKeeper: re-queue lost engines' leases at once.

        One watcher per frontier URL; every live engine runs one, which is safe because
        returning a lost engine's leases is one atomic script
        (``netdisco.frontiers.redis.recovery``).
        """
        url = crawler.settings.frontier
        if self._zookeeper is None or url.startswith("memory") or url in self._recoveries:
            return
        from netdisco.frontiers.redis.recovery import lease_recovery  # redis-py only when asked

        keeper = lease_recovery(url, self._zookeeper, self.incarnation)
        self._recoveries[url] = keeper
        await keeper.start()

    def _deadline(self, deadline: float | None) -> float | None:
        return deadline if deadline is not None else self.settings.stop_deadline

    def _spawn(self, coro: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def _on_spider_changed(self, crawler: Crawler) -> None:
        log.info("spider_state", engine=self.id, spider=crawler.name, state=str(crawler.state))
        self._notify()

    def _notify(self) -> None:
        self._changed.set()
        if self.registry is not None:
            self.registry.data_changed()
        for callback in self._listeners:
            callback(self)

    def _final_states(self) -> dict[str, str]:
        return {name: str(c.state) for name, c in self._crawlers.items()}


_SUMMARY_KEYS = ("name", "state", "started_at", "succeeded", "failed", "items", "queue_size")


def _summary(status: dict[str, Any]) -> dict[str, Any]:
    """The few fields of a spider status that the engine overview shows."""
    return {key: status.get(key) for key in _SUMMARY_KEYS}
