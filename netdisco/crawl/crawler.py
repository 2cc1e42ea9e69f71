"""One spider's crawl: the data flow of steps 1-5, with its lifecycle.

``Crawler`` is the facade a user and the engine hold. It makes the crawl's stages
around one ``CrawlContext`` (spider, settings, counters, frontier): the scheduler (2),
the downloader (3), the scraper (4) and the item stream (5), and, only when the
settings ask for re-crawls, ``Recrawl``. It opens them, hands the crawl to its run loop
(``crawl.workers``) and closes them; its state is its ``Phase`` (``crawl.lifecycle``,
the one table of a crawl's moves).

One request's trip: ``Scheduler.admit_seeds`` (or ``push``, or a callback's links
through ``Scraper.admit``) queues it in the frontier; a worker takes it (or a request
the downloader parked for its busy host), ``Downloader.fetch`` downloads it through
the middleware chain and the download handler, ``Scraper.scrape`` runs its callback
(items to the ``ItemStream``, the one item chain; links back to the scheduler), and
``Acker`` ends its lease once its items are flushed.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import structlog
from reactivex import Observable

from netdisco.crawl import settings as settings_module
from netdisco.crawl.acks import return_parked
from netdisco.crawl.codec import frontier_for
from netdisco.crawl.context import CrawlContext
from netdisco.crawl.downloader import Downloader
from netdisco.crawl.failures import FailedRequests
from netdisco.crawl.feeds import feed_pipelines
from netdisco.crawl.feeds.pipeline import FeedPipeline, WarcFeed
from netdisco.crawl.feeds.warc import WarcMiddleware
from netdisco.crawl.itemchain import ItemChain
from netdisco.crawl.itemstream import ItemStream
from netdisco.crawl.lifecycle import TERMINAL, Phase, PushResult, SpiderState
from netdisco.crawl.middleware.base import Middleware
from netdisco.crawl.pipelines import Pipeline
from netdisco.crawl.politeness import Politeness
from netdisco.crawl.recrawl import wants_pages
from netdisco.crawl.request import Request, outputs
from netdisco.crawl.scheduler import Scheduler
from netdisco.crawl.schemas import ItemChecker, field_names
from netdisco.crawl.scraper import Scraper
from netdisco.crawl.settings import check_crawler
from netdisco.crawl.spider import Spider
from netdisco.crawl.stats import Stats
from netdisco.crawl.transport import DownloadHandler
from netdisco.crawl.workers import PageScope, Workers
from netdisco.exceptions import FrontierFailed, NetdiscoError, SpiderStartFailed
from netdisco.frontiers import Frontier, crawl_identity

log = structlog.get_logger(__name__)
__all__ = ["TERMINAL", "Crawler", "PushResult", "SpiderState", "frontier_for"]


class Crawler:
    """Runs one spider; see the module docstring. ``settings`` is a ``Settings`` or a
    mapping of them (over the spider's ``custom_settings``). ``engine`` names the engine
    in feed paths (``{engine}``; the host name if None). ``download_handler`` fetches
    every hop and robots.txt in place of aiohttp (``MockHandler``: tests, no sockets).
    ``scrapy_settings`` are what Scrapy item pipelines' ``from_crawler`` reads (a Scrapy
    project's settings.py; the spider's ``custom_settings`` if None). ``page_scope``
    wraps each request's processing (a ``-j`` worker's page of items)."""

    def __init__(
        self,
        spider: Spider,
        settings: settings_module.SettingsLike | None = None,
        *,
        pipelines: Sequence[Pipeline] = (),
        frontier: Frontier[Request] | None = None,
        owner: str | None = None,
        engine: str | None = None,
        download_handler: DownloadHandler | None = None,
        scrapy_settings: Mapping[str, Any] | None = None,
        page_scope: PageScope | None = None,
    ) -> None:
        self.spider, self.name = spider, spider.name
        self.settings = s = settings_module.for_spider(spider, settings)
        check_crawler(s)
        self.stats = Stats()
        self.phase = Phase(self.name, self._changed)
        self.started_at: float | None = None
        self.frontier: Frontier[Request] = frontier or frontier_for(s, spider, owner)
        self.ctx = ctx = CrawlContext(spider, s, self.stats, self.frontier)
        self.scheduler = Scheduler(ctx)
        self.stream = _item_stream(ctx, scrapy_settings)
        self.scraper = Scraper(ctx, self.scheduler, self.stream)
        self.feeds, last = _feeds(s, self.name, engine, spider.item_schema)
        self.downloader = Downloader(ctx, self.scheduler, handler=download_handler, last=last)
        self.workers = Workers(
            ctx, self.phase, self.scheduler, self.downloader, self.scraper, self.stream,
            self.failures, page_scope,
        )  # fmt: skip
        self.run_id: str | None = None  # a schedule's tick: a finished crawl begins it anew
        self.already_finished: str | None = None  # finished before, nothing fetched: how
        self._ended_before = False  # to crawl again; the crawl had ended when this run began
        self._pipelines = [*pipelines, *spider.pipelines(), *self.feeds]
        self._listeners: list[Callable[[Crawler], None]] = []
        self._main: asyncio.Task[None] | None = None
        self._close_timeout: float | None = None  # for pending pipeline work, once stopping
        self._context = _logging_context(self.name)

    @property
    def state(self) -> SpiderState:
        """Where the crawl is in its life (its ``Phase``)."""
        return self.phase.state

    @property
    def politeness(self) -> Politeness:
        """Which request may start, and when: the downloader's (``crawl.politeness``)."""
        return self.downloader.politeness

    @functools.cached_property
    def failures(self) -> FailedRequests:
        """The crawl's failed requests, kept in its frontier."""
        return FailedRequests(self.frontier, self.settings.failed_keep)

    @functools.cached_property
    def crawl(self) -> str | None:
        """The shared crawl this spider takes part in (None: its frontier is its own)."""
        return crawl_identity(self.settings.frontier, self.name)

    @property
    def failure(self) -> Exception | None:
        """Why the crawl must end failed (the frontier or the acknowledgements gave up, or
        the spider's ``start()`` raised)."""
        return self.ctx.failure or self.workers.seed_failure

    # ----------------------------------------------------------------- lifecycle
    @property
    def items(self) -> Observable[Any]:
        """The reactive item stream (subscribe or compose operators on it)."""
        return self.stream.observable

    def add_listener(self, callback: Callable[[Crawler], None]) -> None:
        """Call ``callback(crawler)`` after every state change."""
        self._listeners.append(callback)

    def _changed(self) -> None:
        for callback in self._listeners:
            try:
                callback(self)
            except Exception as exc:  # a listener must not break the crawl
                log.error("state_listener_error", spider=self.name, error=repr(exc))

    async def start(self) -> None:
        """Begin crawling on the running loop; returns at once."""
        self.phase.move("start")
        try:
            await self.frontier.open()  # an unreachable Redis fails here, clearly
            await self._begin_run()
            self._ended_before = not self.frontier.finished and await self.frontier.ran_to_end()
            for feed in self.feeds:
                feed.prepare()  # an unwritable feed fails here, naming its path
            if self.settings.render:
                from netdisco.crawl.render import check_available  # Playwright is an extra

                check_available(self.settings)
        except asyncio.CancelledError:  # its opener was stopped (an engine's stop): so is it
            if not self.phase.stopping:
                self.phase.move("stop")
            self.phase.end(SpiderState.STOPPED)
            raise
        except BaseException as exc:  # terminal, so that whoever waits for it is told
            if isinstance(exc, NetdiscoError):
                self.stats.error(f"start: {exc}")
            self.phase.end(SpiderState.FAILED)
            raise
        if self.phase.stopping:  # stopped while it opened: closed without a request
            closing = self._close(SpiderState.STOPPED)
            self._main = asyncio.create_task(closing, context=self._context)
            return
        if self._resume():
            return
        self.started_at = time.time()
        self.stats.restart_clock()
        self.phase.move("opened")
        self._main = asyncio.create_task(
            self._run(), name=f"crawler:{self.name}", context=self._context
        )

    async def _begin_run(self) -> None:
        """Begin a new run (generation) of a finished stored crawl: seen set emptied, pages
        kept. ``run_id`` is a scheduled tick's (the same on every engine of a shared
        crawl); unscheduled, only a crawl that re-crawls (``recrawl``/``age``) begins a new
        run, and otherwise a finished state stays finished. One that did not finish resumes.
        """
        store = self.frontier.pages()
        if store is None or (self.run_id is None and not wants_pages(self.settings)):
            return
        if not await self.frontier.ran_to_end():
            return
        run = self.run_id or f"run-{uuid.uuid4().hex}"
        if await store.begin_run(run):
            log.info("run_begun", run=run)

    def _resume(self) -> bool:
        """Carry on from a stored crawl; True when it already finished (nothing to do)."""
        if self.frontier.finished:  # counters left as they are: this run fetches nothing
            self.already_finished = self.frontier.start_over()
        else:
            stored = self.frontier.stored_stats()
            if stored:  # none kept (a new crawl, or a frontier that keeps none): from here
                self.stats.restore(stored)
            return False
        self._main = asyncio.create_task(self._close(SpiderState.FINISHED), context=self._context)
        return True

    @property
    def keep_alive(self) -> bool:
        """Whether the crawl, out of work, waits for pushes instead of finishing."""
        return self.workers.keep_alive

    @keep_alive.setter
    def keep_alive(self, value: bool) -> None:
        self.workers.keep_alive = value
        self.ctx.notify()  # off: an idle crawl looks again, and finishes once drained

    def pause(self) -> SpiderState:
        """Stop dispatching new requests; those in flight finish."""
        return self.phase.move("pause")

    def resume(self) -> SpiderState:
        """Dispatch again after a pause."""
        return self.phase.move("resume")

    async def retry_failed(
        self, reason: str | None = None, ids: Sequence[str] | None = None
    ) -> int:
        """Queue failed requests again (all, of ``reason``, or ``ids``), while running or
        paused: a crawl that ended has nobody to fetch them."""
        self.phase.check("retry")
        requeued = await self.failures.retry(reason, ids)
        self.ctx.notify()
        return requeued

    async def stop(self, deadline: float | None = None) -> SpiderState:
        """Stop dispatching, give in-flight requests ``deadline`` s, cancel the rest, close."""
        self.phase.move("stop")
        limit = self.settings.stop_deadline if deadline is None else deadline
        self._close_timeout = limit
        await self.workers.stop(limit)
        return await self.wait()

    async def wait(self) -> SpiderState:
        """Wait until the spider is finished, stopped or failed (at once if never started)."""
        if self._main is not None:
            await asyncio.shield(self._main)
        elif self.state is not SpiderState.IDLE:  # still opening
            await self.phase.ended()
            if self._main is not None:  # opened, then closed: its close has ended too
                await asyncio.shield(self._main)
        return self.state

    async def run(self) -> Stats:
        """Start and wait: crawl to the end."""
        await self.start()
        await self.wait()
        return self.stats

    async def push(self, urls: Iterable[str]) -> PushResult:
        """Queue URLs into the spider (depth 0, default callback); say which were refused."""
        self.phase.check("push")
        urls = list(urls)
        requests = [Request(url, callback=self.spider.parse) for url in urls]
        reasons = await self.scheduler.admit(requests)
        result = PushResult()
        for url, reason in zip(urls, reasons, strict=True):
            if reason is None:
                result.accepted.append(url)
            else:
                result.rejected.append((url, reason))
        return result

    def status(self) -> dict[str, Any]:
        """The spider status object that ``GET /netdiscovery/spiders/{name}`` answers."""
        status = {
            "name": self.name,
            "state": self.state.value,
            "started_at": self.started_at,
            **self.stats.as_dict(),
            "errors_by_type": self.stats.errors_by_type(),
            "keep_alive": self.keep_alive,
        }
        if self.already_finished is not None:  # why nothing was fetched, and what to type
            status["already_finished"] = self.already_finished
        return status

    # ----------------------------------------------------------------- the crawl
    async def _run(self) -> None:
        end = SpiderState.FAILED
        try:
            await self.downloader.open()
            await self.stream.open(self._pipelines)
            await self.workers.run(self._close_limit)
            if self.ctx.failure is not None:
                raise self.ctx.failure
            if self.workers.seed_failure is not None:
                raise self.workers.seed_failure
            end = SpiderState.STOPPED if self.phase.stopping else SpiderState.FINISHED
        except Exception as exc:  # reported as the spider's failure
            self._report_failure(_unwrap(exc))
        finally:
            await self._close(end)

    def _close_limit(self) -> float:
        """How long closing may wait on pending work: ``stop``'s deadline, or the setting."""
        return self.settings.stop_deadline if self._close_timeout is None else self._close_timeout

    async def _close(self, end: SpiderState) -> None:
        """Acknowledge what is flushed, close pipelines and frontier, enter ``end``."""
        limit = self._close_limit()
        await self.workers.acks.close(max(limit, 1.0))  # at once if it closed already
        await self.stream.close(self._close_timeout)
        await self.downloader.close()
        await return_parked(self.frontier, self.downloader.drain(), max(limit, 1.0))
        await self._last_counts()  # the closing line's gauges: what the frontier holds now
        if end is SpiderState.FINISHED and self.ctx.failure is not None:
            self._report_failure(self.ctx.failure)
            end = SpiderState.FAILED
        self._finished_before(end)
        if not self.frontier.finished and not await self._persist(end is SpiderState.FINISHED):
            end = SpiderState.FAILED
        await self._spider_closed(end)
        self.phase.end(end)
        log.info("spider_closed", state=end.value, **self.stats.closing())
        await self._close_frontier()

    def _finished_before(self, end: SpiderState) -> None:
        """A shared crawl that had run to its end before this run, which fetched nothing
        again: say so, and how to crawl again (a ``state_dir`` says it at its opening)."""
        s = self.stats
        fetched = s.succeeded + s.failed + s.not_modified + s.age_skipped
        if end is SpiderState.FINISHED and self._ended_before and not fetched:
            self.already_finished = self.frontier.start_over()
            log.warning("crawl_already_finished", to_crawl_again=self.already_finished)

    async def _spider_closed(self, end: SpiderState) -> None:
        """The spider's ``closed(reason)``, once, with Scrapy's reason for ``end``; what it
        raises is counted as a callback's error, and what it yields is not crawled."""
        reason = _CLOSE_REASONS.get(end, end.value)
        try:
            async for _ in outputs(self.spider.closed(reason)):
                pass
        except Exception as exc:
            self.scraper.failed(self.spider.closed, "", exc)

    async def _persist(self, finished: bool) -> bool:
        """Store the frontier's totals and whether the crawl finished; False when the
        frontier cannot (the spider then ends failed)."""
        self.frontier.store_stats(self.stats.totals())
        if finished:
            try:
                await self.frontier.mark_finished()
            except FrontierFailed as exc:
                self._report_failure(exc)
                return False
        return True

    async def _last_counts(self) -> None:
        """Last gauges, bounded: a shared frontier that is down must not keep us open."""
        try:
            async with asyncio.timeout(1.0):
                await self.workers.refresh_counts()
        except (TimeoutError, NetdiscoError) as exc:
            log.warning("frontier_counts_unavailable", error=repr(exc))

    async def _close_frontier(self) -> None:
        """Close the frontier; one that fails to close is logged, never raised."""
        try:  # hands our leases back; what it cannot, the others' lease sweep will
            await self.frontier.close()
        except Exception as exc:
            log.warning("frontier_close_failed", error=repr(exc))

    def _report_failure(self, exc: Exception) -> None:
        """One error line: a frontier's failure says all (no traceback), others are bugs."""
        clear = isinstance(exc, FrontierFailed | SpiderStartFailed)  # told when it happened
        error = str(exc) if clear else repr(exc)
        self.stats.error(f"spider failed: {error}")
        log.error("spider_failed", error=error, exc_info=None if clear else exc)


#: ``Spider.closed``'s reason for how the crawl ended, in Scrapy's words
_CLOSE_REASONS = {
    SpiderState.FINISHED: "finished",
    SpiderState.STOPPED: "shutdown",
    SpiderState.FAILED: "failed",
}


def _unwrap(exc: Exception) -> Exception:
    """The one error a task group raised (its body's, or a task's), not the group."""
    while isinstance(exc, ExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


def _logging_context(spider: str) -> contextvars.Context:
    """The context the crawl's tasks run in: their logs carry the spider's name."""
    context = contextvars.copy_context()
    context.run(structlog.contextvars.bind_contextvars, spider=spider)
    return context


def _item_stream(ctx: CrawlContext, scrapy_settings: Mapping[str, Any] | None) -> ItemStream:
    """The crawl's item chain: its schema check, and Scrapy's item pipelines of the crawl
    (``item_pipelines``) when it has any."""
    s, spider, stats = ctx.settings, ctx.spider, ctx.stats
    chain = None
    if s.item_pipelines:
        given = spider.custom_settings if scrapy_settings is None else scrapy_settings
        chain = ItemChain(s.item_pipelines, spider, stats, given)
    check = ItemChecker(spider.item_schema, s.invalid_items, stats, ctx.fail)
    return ItemStream(stats, s.item_buffer, check=check, chain=chain)


def _feeds(
    s: settings_module.Settings, spider: str, engine: str | None, schema: type | None
) -> tuple[list[FeedPipeline], list[Middleware]]:
    """The spider's feeds (CSV columns from its item schema), and the WARC middleware if
    one archives responses (``feeds.warc``)."""
    columns = tuple(field_names(schema)) if schema is not None else ()
    feeds = feed_pipelines(
        s.feeds, spider=spider, engine=engine, warc_max_size=s.warc_max_size, columns=columns
    )
    archives = [feed for feed in feeds if isinstance(feed, WarcFeed)]
    return feeds, [WarcMiddleware(archives, s.user_agent)] if archives else []
