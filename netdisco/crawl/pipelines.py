"""Step 5 of the data flow: items travel a reactivex Observable into the pipelines.

Every pipeline subscribes to the spider's item stream through its own chain of
reactive ``operators`` (filter, map, buffer_with_count, ...) and handles what comes
out in ``process``. ``DropItem`` ends an item's way through one pipeline.

Backpressure: ``process`` may return an awaitable; the stream keeps at most
``item_buffer`` of them pending and makes the spider wait when it is full, so a
slow pipeline slows the crawl instead of growing memory.

Delivery: the crawler acknowledges a request to its frontier only after
``ItemStream.flush`` (pending work awaited, then every pipeline's ``flush``), so an
item of an acknowledged page is never lost to a crash (at-least-once). A pipeline that
buffers must write its buffer out in ``flush``; items an operator holds back (e.g.
``buffer_with_count``) are not covered until the operator emits them.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import os
import sys
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import IO, Any

import reactivex
import structlog
from reactivex import Observable, abc
from reactivex.subject import Subject

from netdisco.crawl.items import item_dict
from netdisco.crawl.stats import Stats
from netdisco.exceptions import DropItem

log = structlog.get_logger(__name__)
Operator = Callable[[Observable[Any]], Observable[Any]]


def to_jsonable(item: Any) -> Any:
    """An item as JSON-able values: pydantic models dumped in JSON mode, every other
    item (any mapping, dataclass, attrs class, ``Item``) as a dict of its fields
    (``netdisco.crawl.items``); anything else is left to ``json``."""
    dump = getattr(item, "model_dump", None)
    if callable(dump) and not isinstance(item, type):
        return dump(mode="json")
    return item_dict(item)


def json_line(item: Any) -> str:
    """One item as a UTF-8 JSON line (dataclasses as objects, the unknown as strings)."""
    return json.dumps(to_jsonable(item), ensure_ascii=False, default=str) + "\n"


class Pipeline:
    """Base class: override ``process`` (sync or async) and optionally ``operators``."""

    operators: Sequence[Operator] = ()

    def process(self, item: Any) -> Any:
        """Handle one item (or one batch, after a buffering operator)."""
        return None

    async def open(self) -> None:
        """Acquire resources (files, connections) before the first item."""

    async def flush(self) -> None:
        """Make what ``process`` received so far survive a crash of this process.

        Awaited before the requests that yielded those items are acknowledged; the
        crawler batches it (``flush_items``, ``flush_interval``), so it may be costly.
        """

    async def close(self) -> None:
        """Flush and release resources after the last item."""


class ConsolePipeline(Pipeline):
    """Prints each item as one JSON line on standard output."""

    def process(self, item: Any) -> None:
        sys.stdout.write(json_line(item))

    async def flush(self) -> None:
        sys.stdout.flush()


class JsonLinesPipeline(Pipeline):
    """Appends UTF-8 JSON lines to ``path``: one object per line (``overwrite``: truncate first).

    Appending is the default so that a resumed crawl keeps what earlier runs wrote.
    Each call's lines go to the operating system at once (they survive ``kill -9``, and
    the crawler acknowledges a page only after its items were processed); ``close`` also
    ``fsync``s (a power loss may lose lines written since). A buffering operator upstream
    makes ``process`` receive lists: each element is a line.
    """

    def __init__(
        self, path: str | Path, *, operators: Sequence[Operator] = (), overwrite: bool = False
    ) -> None:
        self.path = Path(path)
        self.operators = operators
        self.overwrite = overwrite
        self._file: IO[str] | None = None

    async def open(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = self.path.open("w" if self.overwrite else "a", encoding="utf-8")
        if self._file.tell() and not _ends_with_newline(self.path):
            # a line cut short by a crash: end it, so that the next line stays readable
            log.warning("output_line_incomplete", path=str(self.path))
            self._file.write("\n")

    def process(self, item: Any) -> None:
        assert self._file is not None, "JsonLinesPipeline.open() was not awaited"
        batch = item if isinstance(item, list) else (item,)
        self._file.write("".join(json_line(i) for i in batch))
        self._file.flush()

    async def close(self) -> None:
        if self._file is not None:
            await self.flush()
            os.fsync(self._file.fileno())
            self._file.close()
            self._file = None


def _ends_with_newline(path: Path) -> bool:
    with path.open("rb") as file:
        file.seek(-1, os.SEEK_END)
        return file.read(1) == b"\n"


class CallablePipeline(Pipeline):
    """Hands each item (or batch) to a user function, sync or async."""

    def __init__(self, func: Callable[[Any], Any], *, operators: Sequence[Operator] = ()) -> None:
        self.func = func
        self.operators = operators

    def process(self, item: Any) -> Any:
        return self.func(item)


class ItemStream:
    """The spider's item Observable, its subscribed pipelines and their pending work."""

    def __init__(self, stats: Stats, buffer: int) -> None:
        self.stats = stats
        self.buffer = buffer
        self._subject: Subject[Any] = Subject()
        self._pipelines: list[Pipeline] = []
        self._subscriptions: list[abc.DisposableBase] = []
        self._pending: set[asyncio.Future[Any]] = set()

    @property
    def observable(self) -> Observable[Any]:
        """The raw item stream, for users who subscribe directly."""
        return self._subject

    async def open(self, pipelines: Sequence[Pipeline]) -> None:
        """Open each pipeline and subscribe it through its operators."""
        for pipeline in pipelines:
            await pipeline.open()
            self._subscribe(pipeline)
            self._pipelines.append(pipeline)

    def _subscribe(self, pipeline: Pipeline) -> None:
        """Subscribe ``pipeline``; an operator's error ends a reactive chain, so count it and
        subscribe afresh: one bad item must not silence the pipeline for the rest of the crawl."""
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
        self.stats.pipeline_errors += 1
        self.stats.error(f"pipeline {type(pipeline).__name__}: {exc!r}")
        log.error("pipeline_error", pipeline=type(pipeline).__name__, error=repr(exc))

    async def emit(self, item: Any) -> None:
        """Send one item down the stream, once less than ``buffer`` pipeline work is pending.

        Waiting before sending (the check and ``on_next`` run without a pause between
        them) keeps the bound even when several callbacks emit at once.
        """
        while len(self._pending) >= self.buffer:
            await asyncio.wait(self._pending, return_when=asyncio.FIRST_COMPLETED)
        self.stats.items += 1
        if not self._pipelines and not self._subject.observers:
            self._discarded()
        self._subject.on_next(item)

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
        """Await pending pipeline work, then every pipeline's ``flush``.

        A flush that fails raises: the requests waiting for it must not be acknowledged.
        """
        if self._pending:
            await asyncio.wait(set(self._pending))
        for pipeline in self._pipelines:
            await pipeline.flush()

    async def close(self, timeout: float | None = None) -> None:
        """Complete the stream (flushing buffers), await pending work, close pipelines.

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


__all__ = [
    "CallablePipeline",
    "ConsolePipeline",
    "ItemStream",
    "JsonLinesPipeline",
    "Operator",
    "Pipeline",
    "json_line",
    "reactivex",
    "to_jsonable",
]
