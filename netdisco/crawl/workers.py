"""The crawl's run loop: seeding, ``concurrency`` workers, acknowledgements and progress.

``Crawler`` is the facade a user and the engine hold (settings, lifecycle, status);
this is what runs between its ``opened`` and its end, as Scrapy's execution engine runs
beside its crawler. A worker's loop: wait while paused; take the next request (one the
downloader parked for its host first, else the frontier's); fetch and scrape it
(``Downloader.fetch``, ``Scraper.scrape``, or ``Recrawl`` when re-crawling); hand it to
the ``Acker``, which acknowledges it once its items are flushed. The loop ends when the
frontier is drained everywhere, ``max_pages`` is reached, a stop was asked, or the
frontier failed.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from contextlib import AbstractContextManager

import structlog

from netdisco.crawl.acks import Acker, release
from netdisco.crawl.context import CrawlContext
from netdisco.crawl.downloader import Downloader
from netdisco.crawl.failures import FailedRequests
from netdisco.crawl.itemstream import ItemStream
from netdisco.crawl.lifecycle import Phase
from netdisco.crawl.recrawl import Recrawl
from netdisco.crawl.request import Request
from netdisco.crawl.response import Response
from netdisco.crawl.scheduler import Scheduler
from netdisco.crawl.scraper import Scraper
from netdisco.exceptions import DownloadFailed, FrontierFailed, RequestError, SpiderStartFailed

log = structlog.get_logger(__name__)

#: how often a frontier that other engines share is polled for new work
POLL_INTERVAL = 0.25
#: what each request is processed inside (a ``-j`` worker names the page its items are of)
PageScope = Callable[[Request], AbstractContextManager[None]]


def _no_scope(request: Request) -> AbstractContextManager[None]:
    return contextlib.nullcontext()


class Workers:
    """Runs one crawl's tasks in one ``TaskGroup``; see the module docstring."""

    def __init__(
        self,
        ctx: CrawlContext,
        phase: Phase,
        scheduler: Scheduler,
        downloader: Downloader,
        scraper: Scraper,
        stream: ItemStream,
        failures: FailedRequests,
        page_scope: PageScope | None = None,
    ) -> None:
        self.ctx, self.phase, self.stats = ctx, phase, ctx.stats
        self.frontier, self.settings = ctx.frontier, ctx.settings
        self.scheduler, self.downloader, self.scraper = scheduler, downloader, scraper
        self.acks, self.failures = Acker(ctx, stream), failures
        self.recrawl = Recrawl.wanted(ctx, downloader, scraper)  # only when re-crawling
        self.politeness = downloader.politeness
        self._page_scope = page_scope or _no_scope
        self._seeding = True
        self.seed_failure: SpiderStartFailed | None = None  # start() raised
        self.keep_alive = False  # idle and empty is not the end: pushes may come (``Crawler``)
        self._taking = 0  # workers waiting in the frontier's take
        self._timer: asyncio.TimerHandle | None = None  # wakes a worker for a due host
        self._tasks: list[asyncio.Task[None]] = []

    async def run(self, close_limit: Callable[[], float]) -> None:
        """Crawl until every worker has ended, then close the acknowledgements (within
        ``close_limit()`` s: a stop's deadline, or the setting)."""
        async with asyncio.TaskGroup() as group:
            progress = group.create_task(self._report_progress())
            acking = group.create_task(self.acks.run())
            seeding = group.create_task(self._seed())
            count = self.settings.concurrency
            self._tasks = [group.create_task(self._worker()) for _ in range(count)]
            await asyncio.wait(self._tasks)
            seeding.cancel()
            progress.cancel()
            await self.acks.close(max(close_limit(), 1.0))
            acking.cancel()  # a flush that outlived the close's bound (a hung pipeline)

    async def stop(self, limit: float) -> None:
        """A stop was asked: give the workers ``limit`` s to end their requests, then
        cancel them."""
        self.ctx.notify()
        running = [task for task in self._tasks if not task.done()]
        if running:
            _, late = await asyncio.wait(running, timeout=limit)
            for task in late:
                task.cancel()

    async def refresh_counts(self) -> None:
        """Copy the frontier's queue size and seen count, and the downloader's parked
        requests per host, into the gauges."""
        self.stats.parked = self.politeness.parked_by_host()
        self.stats.idle_share = self.politeness.idle_share()
        queued, _, seen = await self.frontier.counts()
        self.stats.queue_size, self.stats.seen = queued, seen

    async def _report_progress(self) -> None:
        """Refresh gauges (and a stored frontier's totals) twice a second; log a progress
        line every ``progress_interval``. A frontier that failed ends the crawl."""
        last_line = time.monotonic()
        while True:
            await asyncio.sleep(0.5)
            try:
                await self.refresh_counts()
            except FrontierFailed as exc:
                self.ctx.fail(exc)
                return
            self.frontier.store_stats(self.stats.totals())
            interval = self.settings.progress_interval
            if interval and time.monotonic() - last_line >= interval:
                last_line = time.monotonic()
                log.info(
                    "progress",
                    pages=self.stats.succeeded,
                    pages_per_second=round(self.stats.pages.per_second(5), 1),
                    queue=self.stats.queue_size,
                    in_flight=self.stats.in_flight,
                )

    async def _seed(self) -> None:
        try:
            await self.scheduler.admit_seeds(self.ctx.spider.start())
        except Exception as exc:  # a broken seed source fails the crawl, visibly
            self.stats.spider_error(exc)
            self.stats.error(f"start(): {exc!r}")
            log.error("seed_error", error=repr(exc), exc_info=exc)
            # the seeds it gave are still crawled; then the crawl ends failed (``Crawler``)
            self.seed_failure = SpiderStartFailed(f"the spider's start() raised {exc!r}")
        finally:
            self._seeding = False
            self.ctx.notify()

    async def _worker(self) -> None:
        try:
            await self._work_loop()
        except FrontierFailed as exc:
            self.ctx.fail(exc)

    async def _work_loop(self) -> None:
        while not (self.phase.stopping or self.ctx.finished):
            if self.phase.paused:
                await self.phase.unpaused()
                continue
            if self._budget_spent():
                await self._idle()
                continue
            request = self.politeness.ready()
            if request is not None and (due := self.politeness.next_due()) is not None:
                self._wake_at(due)  # another host has requests aside: when it is due
            if request is None and self.politeness.taking():
                request = await self._take()
                if request is not None and not await self._placed(request):
                    continue
            if request is None:
                await self._idle()
                continue
            with self._page_scope(request):
                await self._process(request)

    async def _placed(self, request: Request) -> bool:
        """Whether a request just taken starts now; else it waits aside for its host, or
        goes back to the frontier when there is no room (``crawl.hosts``)."""
        placement = self.politeness.place(request)
        if placement == "back":
            await release(self.frontier, request, requeue=True, bounded=self.phase.stopping)
        return placement == "go"

    async def _take(self) -> Request | None:
        """The frontier's next request; a take under way counts against ``max_pages``
        (a shared frontier's take waits, and every worker would pass the check)."""
        self._taking += 1
        try:
            return await self.frontier.take()
        finally:
            self._taking -= 1

    def _budget_spent(self) -> bool:
        limit = self.settings.max_pages
        if not limit:
            return False
        if self.stats.succeeded >= limit:
            self.ctx.finish()
        return self.stats.succeeded + self.stats.in_flight + self._taking >= limit

    async def _idle(self) -> None:
        """Wait for work, or end the crawl when nothing is queued or in flight anywhere."""
        if not self._seeding and self.stats.in_flight == 0:
            queued, leased, _ = await self.frontier.counts()
            if queued == 0 and leased == 0 and not self.keep_alive:
                self.ctx.finish()
                return
        due = self.politeness.next_due()  # a host's delay running out wakes nobody else
        if due is not None:
            self._wake_at(due)
        await self.ctx.wait_for_work(0 if due == 0 else POLL_INTERVAL)  # 0: look again

    def _wake_at(self, due: float) -> None:
        """Wake one idle worker in ``due`` s, when the next host with requests aside may
        start. One timer for the crawl, not a timed sleep in each idle worker: at a delay
        every idle worker woke at every start, most for nothing."""
        loop = asyncio.get_running_loop()
        at = loop.time() + due
        if self._timer is not None:
            if self._timer.when() <= at:
                return  # one as early is set
            self._timer.cancel()
        self._timer = loop.call_at(at, self._due)

    def _due(self) -> None:
        self._timer = None
        self.ctx.notify(1)

    async def _process(self, request: Request) -> None:
        host = request.host_key
        self.stats.begin(host)
        finished = acknowledge = False
        try:
            try:
                acknowledge = await self._fetch_and_scrape(request)
            except RequestError as exc:
                await self._failed(request, exc)
                acknowledge = True
            except FrontierFailed:
                raise
            except Exception as exc:  # an unforeseen failure costs one request, never a worker
                log.error("download_error", url=request.url, error=repr(exc), exc_info=exc)
                await self._failed(request, DownloadFailed(repr(exc), url=request.url))
                acknowledge = True
            finished = acknowledge
        finally:
            self.politeness.release(request)  # a re-crawl may have fetched nothing
            self.stats.end(host)
            if finished:  # acknowledged once its items are flushed
                self.acks.add(request)
            else:
                await release(self.frontier, request, requeue=True, bounded=self.phase.stopping)
            self.ctx.notify(1)  # its slot is free, or the crawl may be over

    async def _fetch_and_scrape(self, request: Request) -> bool:
        """Steps 3 and 4 (a re-crawl may skip the download); False: give it back unfetched."""
        if self.recrawl is not None:
            deferred = await self.recrawl.process(request)
        else:
            outcome = await self.downloader.fetch(request)
            if isinstance(outcome, Response):
                await self.scraper.scrape(request, outcome)
                return True
            deferred = outcome
        if deferred is not None and deferred.hop is not None:  # queued before we are acked
            await self.scraper.admit([deferred.hop])
        return deferred is None or not deferred.give_back

    async def _failed(self, request: Request, exc: RequestError) -> None:
        self.stats.count_failure(exc)
        await self.failures.record(request, exc)
        self.stats.error(f"{request.url}: {exc}")
        log.warning("request_failed", url=request.url, error=str(exc), kind=type(exc).__name__)
        if request.errback is not None:
            await self.scraper.run(
                request.errback, request, exc, url=request.url, depth=request.depth + 1
            )
