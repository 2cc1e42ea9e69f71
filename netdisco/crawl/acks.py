"""Acknowledgements: a request leaves the frontier only once its items are safe.

A finished request is acknowledged (``frontier.done``) only after the items its
callback yielded were handed to every pipeline and the pipelines flushed them
(``ItemStream.flush``). So items are at-least-once with every frontier: a crash
before the acknowledgement means the page is fetched again, never that its items
are lost. Flushes are batched, one per ``flush_items`` items or ``flush_interval``
seconds, and the workers do not wait for them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import structlog

from netdisco._tasks import wait_event
from netdisco.crawl.context import CrawlContext
from netdisco.crawl.itemstream import ItemStream
from netdisco.crawl.request import Request
from netdisco.exceptions import NetdiscoError
from netdisco.frontiers import Frontier

log = structlog.get_logger(__name__)


class Acker:
    """Batches flush-then-acknowledge for the requests the workers finished."""

    def __init__(self, ctx: CrawlContext, stream: ItemStream) -> None:
        self.ctx = ctx
        self.frontier = ctx.frontier
        self.stream = stream
        self.stats = ctx.stats
        self.interval = ctx.settings.flush_interval
        self.items = ctx.settings.flush_items
        self._pending: list[Request] = []
        self._wake = asyncio.Event()
        self._full = asyncio.Event()
        self._mark = 0  # stats.items at the last flush
        self._closing = False
        self._ended = asyncio.Event()  # the batching loop returned (or never ran)
        self._ended.set()

    @property
    def pending(self) -> int:
        """Requests finished and not yet acknowledged."""
        return len(self._pending)

    async def run(self) -> None:
        """The batching loop, until ``close``; run it as a task of the crawl's group."""
        self._ended.clear()
        try:
            await self._loop()
        finally:
            self._ended.set()

    def add(self, request: Request) -> None:
        """``request`` is finished: acknowledge it after the next flush."""
        self._pending.append(request)
        self._wake.set()
        if self.stats.items - self._mark >= self.items:
            self._full.set()

    async def _loop(self) -> None:
        try:
            while not self._closing:
                await self._wake.wait()
                await wait_event(self._full, self.interval)
                await self.flush()
        except Exception as exc:  # the crawl cannot go on without its acknowledgements
            self.ctx.fail(exc)

    async def flush(self) -> None:
        """Flush every pipeline, then acknowledge every request finished before it."""
        batch, self._pending = self._pending, []
        self._wake.clear()
        self._full.clear()
        self._mark = self.stats.items
        if batch:
            await self.stream.flush()
            for request in batch:  # a frontier batches acks itself (Redis, SQLite)
                await self.frontier.done(request)

    async def close(self, timeout: float) -> None:
        """Let a flush under way end, then flush and acknowledge the rest, within ``timeout``."""
        self._closing = True
        self._wake.set()
        self._full.set()
        try:
            async with asyncio.timeout(timeout):
                await self._ended.wait()
                await self.flush()
        except TimeoutError:
            log.warning("acks_not_flushed", pending=len(self._pending), timeout=timeout)
        except Exception as exc:  # not acknowledged: fetched again next time, never lost
            self.ctx.fail(exc)


async def return_parked(
    frontier: Frontier[Request], requests: Sequence[Request], deadline: float
) -> None:
    """Put requests held aside for busy hosts back, all at once, within one ``deadline``.

    A frontier that is down (Redis) must not hold a stopping spider for a deadline
    per request; what is not returned in time, the lease sweep of others returns.
    """
    if not requests:
        return
    try:
        async with asyncio.timeout(deadline):
            await asyncio.gather(*(frontier.done(r, requeue=True) for r in requests))
    except (TimeoutError, NetdiscoError) as exc:
        log.warning("parked_not_returned", count=len(requests), error=repr(exc))


async def release(
    frontier: Frontier[Request], request: Request, *, requeue: bool, bounded: bool
) -> None:
    """End our lease on ``request``; ``bounded`` (closing): a frontier that is down gets 1 s.

    Mid-crawl, a frontier that is down is waited for: the crawl pauses until it is back.
    """
    if not bounded:
        await frontier.done(request, requeue=requeue)
        return
    try:
        async with asyncio.timeout(1.0):
            await frontier.done(request, requeue=requeue)
    except (TimeoutError, NetdiscoError) as exc:
        log.warning("lease_not_released", url=request.url, error=repr(exc))
