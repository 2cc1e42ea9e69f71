"""Step 5 of the data flow: the one way an item travels, from a callback to a flushed
feed, in the order it goes.

1. ``emit(item, url)``: the scraper hands over what a callback yielded.
2. The spider's ``item_schema`` checks it (``invalid_items``: keep, drop, or fail the
   crawl; ``crawl.schemas``).
3. Scrapy's item pipelines (``item_pipelines``, ``crawl.itemchain``) run as a chain,
   each given what the one before returned; ``DropItem`` ends the item there.
4. Backpressure: once ``item_buffer`` pipeline calls are pending, the callback waits.
5. The item is counted and sent down the reactivex ``Observable`` (``items``). Each
   netdisco pipeline and feed is subscribed to it through its own ``operators`` and
   handles what comes out in ``process`` (sync, or an awaitable kept pending); a user
   may subscribe to the Observable too.
6. ``flush``: the pending calls awaited and every pipeline flushed. The ``Acker``
   acknowledges a request only after the flush that follows its items, so an item of
   an acknowledged page is never lost to a crash (at-least-once). Items an operator
   holds back (``buffer_with_count``) are covered once it emits them.

An operator's error ends a reactive subscription, so a pipeline whose operator raised
is counted and subscribed afresh: one bad item must not silence it for the rest of
the crawl.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import structlog
from reactivex import Observable, abc
from reactivex.subject import Subject

from netdisco.crawl.itemchain import ItemChain
from netdisco.crawl.pipelines import Pipeline
from netdisco.crawl.stats import Stats
from netdisco.exceptions import DropItem

log = structlog.get_logger(__name__)
#: the schema check of step 2: the item to go on with, or None (``crawl.schemas``)
Check = Callable[[Any, str], Any | None]


class ItemStream:
    """One crawl's item chain; see the module docstring."""

    def __init__(
        self,
        stats: Stats,
        buffer: int,
        *,
        check: Check | None = None,
        chain: ItemChain | None = None,
    ) -> None:
        self.stats = stats
        self.buffer = buffer
        self._check = check
        self._chain = chain
        self._subject: Subject[Any] = Subject()
        self._pipelines: list[Pipeline] = []
        self._subscriptions: list[abc.DisposableBase] = []
        self._pending: set[asyncio.Future[Any]] = set()

    @property
    def observable(self) -> Observable[Any]:
        """The item stream after checks and Scrapy's pipelines, for users to subscribe."""
        return self._subject

    async def open(self, pipelines: Sequence[Pipeline]) -> None:
        """Open Scrapy's pipelines, then each of ours, subscribed through its operators."""
        if self._chain is not None:
            await self._chain.open()
        for pipeline in pipelines:
            await pipeline.open()
            self._subscribe(pipeline)
            self._pipelines.append(pipeline)

    async def emit(self, item: Any, url: str = "") -> None:
        """Steps 1-5 for one item of the page at ``url``.

        Waiting before sending (the check and ``on_next`` run without a pause between
        them) keeps the bound even when several callbacks emit at once.
        """
        if self._check is not None and (item := self._check(item, url)) is None:
            return
        if self._chain is not None and (item := await self._chain.process(item)) is None:
            return
        while len(self._pending) >= self.buffer:
            await asyncio.wait(self._pending, return_when=asyncio.FIRST_COMPLETED)
        self.stats.items += 1
        if not self._pipelines and not self._subject.observers:
            self._discarded()
        self._subject.on_next(item)

    def _subscribe(self, pipeline: Pipeline) -> None:
        source: Observable[Any] = self._subject
        for operator in pipeline.operators:
            source = operator(source)
        subscribing = True

        def on_error(exc: Exception) -> None:
            self._failed(pipeline, exc)
            if not subscribing:  # an error at subscription time would recur forever
                self._subscribe(pipeline)

        self._subscriptions.append(
            source.subscribe(
                on_next=lambda value: self._deliver(pipeline, value), on_error=on_error
            )
        )
        subscribing = False

    def _deliver(self, pipeline: Pipeline, value: Any) -> None:
        try:
            result = pipeline.process(value)
        except DropItem as exc:
            self.stats.dropped_items += 1
            log.debug("item_dropped", pipeline=type(pipeline).__name__, reason=str(exc))
            return
        except Exception as exc:  # a pipeline's bug must not stop the crawl
            self._failed(pipeline, exc)
            return
        if inspect.isawaitable(result):
            self._track(pipeline, result)

    def _track(self, pipeline: Pipeline, result: Awaitable[Any]) -> None:
        future = asyncio.ensure_future(result)
        self._pending.add(future)

        def finished(done: asyncio.Future[Any]) -> None:
            self._pending.discard(done)
            if done.cancelled():
                return
            exc = done.exception()
            if isinstance(exc, DropItem):
                self.stats.dropped_items += 1
            elif exc is not None:
                self._failed(pipeline, exc)

        future.add_done_callback(finished)

    def _failed(self, pipeline: Pipeline, exc: BaseException) -> None:
        self.stats.pipeline_error(exc)
        self.stats.error(f"pipeline {type(pipeline).__name__}: {exc!r}")
        log.error("pipeline_error", pipeline=type(pipeline).__name__, error=repr(exc))

    def _discarded(self) -> None:
        """No feed, pipeline or subscriber takes items: count it, and say so once."""
        if not self.stats.items_discarded:
            log.warning(
                "items_discarded",
                reason="no feed and no pipeline: the spider's items go nowhere",
                hint="add a feed (-o items.jsonl, or the feeds setting) or a pipeline",
            )
        self.stats.items_discarded += 1

    async def flush(self) -> None:
        """Step 6: await pending pipeline work, then every pipeline's ``flush``.

        A flush that fails raises: the requests waiting for it must not be acknowledged.
        """
        if self._pending:
            await asyncio.wait(set(self._pending))
        for pipeline in self._pipelines:
            await pipeline.flush()

    async def close(self, timeout: float | None = None) -> None:
        """Complete the stream (flushing buffers), await pending work, close pipelines
        (ours, then Scrapy's).

        Pending work still running after ``timeout`` seconds is cancelled, so that a hung
        pipeline cannot keep a stopping spider from ever closing.
        """
        self._subject.on_completed()
        if self._pending:
            _, late = await asyncio.wait(set(self._pending), timeout=timeout)
            for future in late:
                future.cancel()
            if late:
                log.warning("pipeline_work_cancelled", pending=len(late))
        for subscription in self._subscriptions:
            subscription.dispose()
        for pipeline in self._pipelines:
            try:
                await pipeline.close()
            except Exception as exc:  # close the others all the same
                self._failed(pipeline, exc)
        if self._chain is not None:
            await self._chain.close()
