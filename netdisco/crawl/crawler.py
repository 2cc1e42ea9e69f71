"""One spider's crawl: the data flow of steps 1-5, with its lifecycle.

``Crawler`` wires the scheduler (2), the downloader (3), the scraper (4) and the
item stream (5) around a frontier, runs ``concurrency`` worker tasks on the
running loop, and moves through ``SpiderState`` on start, pause, resume, stop
and when the frontier is drained.
"""

from __future__ import annotations

import asyncio
import contextvars
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import structlog
from reactivex import Observable

from netdisco.crawl import settings as settings_module
from netdisco.crawl.acks import Acker, return_parked
from netdisco.crawl.codec import frontier_for
from netdisco.crawl.downloader import Downloader, Parking
from netdisco.crawl.feeds import feed_pipelines
from netdisco.crawl.lifecycle import ALLOWED, TERMINAL, PushResult, SpiderState
from netdisco.crawl.pipelines import ItemStream, Pipeline
from netdisco.crawl.recrawl import PageFetcher, begin_run
from netdisco.crawl.request import Request
from netdisco.crawl.scheduler import Scheduler, Scope
from netdisco.crawl.scraper import Scraper
from netdisco.crawl.settings import check_recrawl
from netdisco.crawl.spider import Spider
from netdisco.crawl.stats import Stats
from netdisco.crawl.upkeep import (
    admit_in_batches,
    close_frontier,
    persist,
    release,
    report_failure,
    report_progress,
)
from netdisco.exceptions import (
    DownloadFailed,
    FrontierFailed,
    InvalidTransition,
    NetdiscoError,
    RedirectHandedOff,
    RequestError,
)
from netdisco.frontiers import Connected, Frontier, Persistent, page_store

log = structlog.get_logger(__name__)
__all__ = ["TERMINAL", "Crawler", "PushResult", "SpiderState", "frontier_for"]


#: how often a frontier that other engines share is polled for new work
POLL_INTERVAL = 0.25


class Crawler:
    """Runs one spider; see the module docstring. ``engine`` names the engine in feed
    paths (``{engine}``; the host name if None)."""

    def __init__(
        self,
        spider: Spider,
        settings: settings_module.SettingsLike | None = None,
        *,
        pipelines: Sequence[Pipeline] = (),
        frontier: Frontier[Request] | None = None,
        owner: str | None = None,
        engine: str | None = None,
    ) -> None:
        self.spider = spider
        self.name = spider.name
        self.settings = settings_module.for_spider(spider, settings)
        self.stats = Stats()
        self.state = SpiderState.IDLE
        self.started_at: float | None = None
        s = self.settings
        check_recrawl(s)
        self.frontier: Frontier[Request] = frontier or frontier_for(s, spider, owner)
        self.scope = Scope(spider.allowed_domains, s.allow, s.deny, s.host_cache_size)
        self.scheduler = Scheduler(self.settings, self.scope, self.frontier, self.stats)
        self.stream = ItemStream(self.stats, self.settings.item_buffer)
        self.scraper = Scraper(self._admit, self.stream, self.stats)
        self.fetch = PageFetcher(spider, s, self.stats, self.scraper, page_store(self.frontier))
        self.downloader = self.fetch.downloader = Downloader(
            s, self.stats, self.scope.reason, spider=spider, claim=self.scheduler.claim,
            first=self.fetch.middlewares(),
        )  # fmt: skip
        self.parking = Parking(self.downloader, 4 * self.settings.concurrency)
        self.run_id: str | None = None  # a schedule's tick: a finished crawl begins it anew
        self.acks = Acker(self.frontier, self.stream, self.stats, self.settings, self._fail)
        self.failure: Exception | None = None  # why the crawl must end failed
        self.feeds = feed_pipelines(self.settings.feeds, spider=self.name, engine=engine)
        self._pipelines = [*pipelines, *spider.pipelines(), *self.feeds]
        self._listeners: list[Callable[[Crawler], None]] = []
        self._init_run_state()

    def _init_run_state(self) -> None:
        """What the workers share while the crawl runs; logs carry the spider's name."""
        self._unpaused = asyncio.Event()
        self._work = asyncio.Event()
        self._idle_workers = 0
        self._seeding = True
        self._stopping = False
        self._finished = False
        self._workers: list[asyncio.Task[None]] = []
        self._main: asyncio.Task[None] | None = None
        self._opening = False
        self._close_timeout: float | None = None  # for pending pipeline work, once stopping
        self._context = contextvars.copy_context()
        self._context.run(structlog.contextvars.bind_contextvars, spider=self.name)

    # ----------------------------------------------------------------- lifecycle
    @property
    def items(self) -> Observable[Any]:
        """The reactive item stream (subscribe or compose operators on it)."""
        return self.stream.observable

    def add_listener(self, callback: Callable[[Crawler], None]) -> None:
        """Call ``callback(crawler)`` after every state change."""
        self._listeners.append(callback)

    def _check(self, action: str) -> None:
        if self.state not in ALLOWED[action]:
            raise InvalidTransition(self.name, self.state.value, action)

    def _set_state(self, state: SpiderState) -> None:
        self.state = state
        for callback in self._listeners:
            try:
                callback(self)
            except Exception as exc:  # a listener must not break the crawl
                log.error("state_listener_error", spider=self.name, error=repr(exc))

    async def start(self) -> None:
        """Begin crawling on the running loop; returns at once."""
        self._check("start")
        if self._opening:
            raise InvalidTransition(self.name, "starting", "start")
        self._opening = True
        try:
            self.downloader.defer_to(self.frontier)  # host queues in Redis hold politeness
            if isinstance(self.frontier, Connected):
                await self.frontier.open()  # an unreachable Redis fails here, clearly
            await begin_run(self.frontier, self.fetch.pages, self.settings, self.run_id)
            for feed in self.feeds:
                feed.prepare()  # an unwritable feed fails here, naming its path
            if self.settings.render:
                from netdisco.crawl.render import check_available  # Playwright is an extra

                check_available(self.settings)
        except NetdiscoError as exc:  # terminal, so that whoever waits for it is told
            self.stats.error(f"start: {exc}")
            self._set_state(SpiderState.FAILED)
            raise
        finally:
            self._opening = False
        if isinstance(self.frontier, Persistent) and self._resume(self.frontier):
            return
        self.started_at = time.time()
        self.stats.restart_clock()
        self._unpaused.set()
        self._set_state(SpiderState.RUNNING)
        self._main = asyncio.create_task(
            self._run(), name=f"crawler:{self.name}", context=self._context
        )

    def _resume(self, frontier: Persistent) -> bool:
        """Carry on from a stored crawl; True when it already finished (nothing to do)."""
        self.stats.restore(frontier.stored_stats())
        if not frontier.finished:
            return False
        self._main = asyncio.create_task(self._close(SpiderState.FINISHED), context=self._context)
        return True

    def pause(self) -> SpiderState:
        """Stop dispatching new requests; those in flight finish."""
        self._check("pause")
        self._unpaused.clear()
        self._set_state(SpiderState.PAUSED)
        return self.state

    def resume(self) -> SpiderState:
        """Dispatch again after a pause."""
        self._check("resume")
        self._unpaused.set()
        self._set_state(SpiderState.RUNNING)
        return self.state

    async def stop(self, deadline: float | None = None) -> SpiderState:
        """Stop dispatching, give in-flight requests ``deadline`` s, cancel the rest, close."""
        self._check("stop")
        self._set_state(SpiderState.STOPPING)
        self._stopping = True
        self._unpaused.set()
        self._notify()
        limit = self.settings.stop_deadline if deadline is None else deadline
        self._close_timeout = limit
        workers = [w for w in self._workers if not w.done()]
        if workers:
            _, late = await asyncio.wait(workers, timeout=limit)
            for task in late:
                task.cancel()
        return await self.wait()

    async def wait(self) -> SpiderState:
        """Wait until the spider is finished, stopped or failed."""
        if self._main is not None:
            await asyncio.shield(self._main)
        return self.state

    async def run(self) -> Stats:
        """Start and wait: crawl to the end."""
        await self.start()
        await self.wait()
        return self.stats

    async def push(self, urls: Iterable[str]) -> PushResult:
        """Queue URLs into the spider (depth 0, default callback); say which were refused."""
        self._check("push")
        urls = list(urls)
        requests = [Request(url, callback=self.spider.parse) for url in urls]
        reasons = await self._admit(requests)
        result = PushResult()
        for url, reason in zip(urls, reasons, strict=True):
            if reason is None:
                result.accepted.append(url)
            else:
                result.rejected.append((url, reason))
        return result

    def status(self) -> dict[str, Any]:
        """The spider status object that ``GET /netdiscovery/spiders/{name}`` answers."""
        return {
            "name": self.name,
            "state": self.state.value,
            "started_at": self.started_at,
            **self.stats.as_dict(),
        }

    # ----------------------------------------------------------------- the crawl
    async def _run(self) -> None:
        progress = asyncio.create_task(
            report_progress(self.frontier, self.stats, self.settings, self._fail)
        )
        end = SpiderState.FAILED
        try:
            await self.downloader.open()
            await self.stream.open(self._pipelines)
            self.acks.start()
            seeding = asyncio.create_task(self._seed())
            self._workers = [
                asyncio.create_task(self._worker()) for _ in range(self.settings.concurrency)
            ]
            await asyncio.gather(*self._workers, return_exceptions=True)
            seeding.cancel()
            if self.failure is not None:
                raise self.failure
            end = SpiderState.STOPPED if self._stopping else SpiderState.FINISHED
        except Exception as exc:  # reported as the spider's failure
            report_failure(self.stats, exc)
        finally:
            progress.cancel()
            await self._close(end)

    def _fail(self, exc: Exception) -> None:
        """End the crawl failed: the frontier or the acknowledgements cannot go on."""
        if self.failure is None:
            self.failure = exc
        self._finish()

    async def _close(self, end: SpiderState) -> None:
        """Acknowledge what is flushed, close pipelines and frontier, enter ``end``."""
        limit = self.settings.stop_deadline if self._close_timeout is None else self._close_timeout
        await self.acks.close(max(limit, 1.0))
        await self.stream.close(self._close_timeout)
        await self.downloader.close()
        await return_parked(self.frontier, self.parking.drain(), max(limit, 1.0))
        if end is SpiderState.FINISHED and self.failure is not None:
            report_failure(self.stats, self.failure)
            end = SpiderState.FAILED
        if not await persist(self.frontier, self.stats, end is SpiderState.FINISHED):
            end = SpiderState.FAILED
        self._set_state(end)
        log.info("spider_closed", state=end.value, **self.stats.as_dict())
        await close_frontier(self.frontier, self.stats)

    async def _seed(self) -> None:
        try:
            await admit_in_batches(self.spider.start(), self._admit)
        except Exception as exc:  # a broken seed source: the seeds it gave still count
            self.stats.callback_errors += 1
            self.stats.error(f"start(): {exc!r}")
            log.error("seed_error", error=repr(exc), exc_info=exc)
        finally:
            self._seeding = False
            self._notify()

    async def _admit(self, requests: list[Request]) -> list[str | None]:
        reasons = await self.scheduler.admit(requests)
        self._notify()
        return reasons

    def _notify(self) -> None:
        """Wake idle workers: there is new work, or the crawl may be over."""
        if self._idle_workers:
            self._work.set()
            self._work = asyncio.Event()

    async def _worker(self) -> None:
        try:
            await self._work_loop()
        except FrontierFailed as exc:
            self._fail(exc)

    async def _work_loop(self) -> None:
        while not (self._stopping or self._finished):
            if not self._unpaused.is_set():
                await self._unpaused.wait()
                continue
            if self._budget_spent():
                await self._idle()
                continue
            request = self.parking.ready() or await self.frontier.take()
            if request is None:
                await self._idle()
                continue
            if not self.parking.park(request):
                await self._process(request)

    def _budget_spent(self) -> bool:
        limit = self.settings.max_pages
        if not limit:
            return False
        if self.stats.succeeded >= limit:
            self._finish()
        return self.stats.succeeded + self.stats.in_flight >= limit

    async def _idle(self) -> None:
        """Wait for work, or end the crawl when nothing is queued or in flight anywhere."""
        if not self._seeding and self.stats.in_flight == 0:
            queued, leased, _ = await self.frontier.counts()
            if queued == 0 and leased == 0:
                self._finish()
                return
        event = self._work
        self._idle_workers += 1
        try:
            await asyncio.wait_for(event.wait(), POLL_INTERVAL)
        except TimeoutError:
            pass
        finally:
            self._idle_workers -= 1

    def _finish(self) -> None:
        self._finished = True
        self._notify()

    async def _process(self, request: Request) -> None:
        self.stats.in_flight += 1
        finished = False
        try:
            try:
                await self.fetch(request)  # downloaded (or not: re-crawls) and scraped
            except RequestError as exc:
                await self._failed(request, exc)
            except FrontierFailed:
                raise
            except Exception as exc:  # an unforeseen failure costs one request, never a worker
                log.error("download_error", url=request.url, error=repr(exc), exc_info=exc)
                await self._failed(request, DownloadFailed(repr(exc), url=request.url))
            finished = True
        finally:
            self.stats.in_flight -= 1
            if finished:  # acknowledged once its items are flushed
                self.acks.add(request)
            else:
                await release(self.frontier, request, requeue=True, bounded=self._stopping)
            self._notify()

    async def _failed(self, request: Request, exc: RequestError) -> None:
        if isinstance(exc, RedirectHandedOff):  # queued for its host before we are acked
            await self._admit([exc.hop])
        if exc.deferred:  # waits in the frontier (host queues): not a failure
            return
        self.stats.count_failure(exc)
        self.stats.error(f"{request.url}: {exc}")
        log.warning("request_failed", url=request.url, error=str(exc), kind=type(exc).__name__)
        if request.errback is not None:
            await self.scraper.run(
                request.errback, request, exc, url=request.url, depth=request.depth + 1
            )
