"""The crawl's upkeep around its workers: gauges and progress lines, seeding in
batches, releasing leases and closing the frontier, each bounded when closing."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import structlog

from netdisco.crawl.request import Request
from netdisco.crawl.settings import Settings
from netdisco.crawl.stats import Stats
from netdisco.exceptions import FrontierFailed, NetdiscoError
from netdisco.frontiers import Frontier

log = structlog.get_logger(__name__)


async def refresh_counts(frontier: Frontier[Request], stats: Stats) -> None:
    """Copy the frontier's queue size and seen count into the gauges."""
    queued, _, seen = await frontier.counts()
    stats.queue_size, stats.seen = queued, seen


async def report_progress(
    frontier: Frontier[Request],
    stats: Stats,
    settings: Settings,
    on_failure: Callable[[Exception], None],
) -> None:
    """Refresh gauges (and a persistent frontier's totals) twice a second; log a progress
    line every ``progress_interval``. A frontier that failed ends the crawl."""
    last_line = time.monotonic()
    while True:
        await asyncio.sleep(0.5)
        try:
            await refresh_counts(frontier, stats)
        except FrontierFailed as exc:
            on_failure(exc)
            return
        frontier.store_stats(stats.totals())
        interval = settings.progress_interval
        if interval and time.monotonic() - last_line >= interval:
            last_line = time.monotonic()
            log.info(
                "progress",
                pages=stats.succeeded,
                pages_per_second=round(stats.pages.per_second(5), 1),
                queue=stats.queue_size,
                in_flight=stats.in_flight,
            )


async def admit_in_batches(
    seeds: AsyncIterator[Request], admit: Callable[[list[Request]], Awaitable[Any]]
) -> None:
    """Admit seeds 100 at a time; those read before an error are admitted all the same."""
    batch: list[Request] = []
    try:
        async for request in seeds:
            batch.append(request)
            if len(batch) >= 100:
                await admit(batch)
                batch = []
    finally:
        if batch:
            await admit(batch)


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


async def close_frontier(frontier: Frontier[Request], stats: Stats) -> None:
    """Last gauges, then close: a shared frontier that is down must not keep us open."""
    try:
        async with asyncio.timeout(1.0):
            await refresh_counts(frontier, stats)
    except (TimeoutError, NetdiscoError) as exc:
        log.warning("frontier_counts_unavailable", error=repr(exc))
    try:  # hands our leases back; what it cannot, the others' lease sweep will
        await frontier.close()
    except Exception as exc:
        log.warning("frontier_close_failed", error=repr(exc))


def report_failure(stats: Stats, exc: Exception) -> None:
    """One error line: a frontier's failure says all (no traceback), others are bugs."""
    clear = isinstance(exc, FrontierFailed)
    error = str(exc) if clear else repr(exc)
    stats.error(f"spider failed: {error}")
    log.error("spider_failed", error=error, exc_info=None if clear else exc)


async def persist(frontier: Frontier[Request], stats: Stats, finished: bool) -> bool:
    """Store a persistent frontier's totals and whether the crawl finished; False when
    the frontier cannot (the spider then ends failed)."""
    frontier.store_stats(stats.totals())
    if finished:
        try:
            await frontier.mark_finished()
        except FrontierFailed as exc:
            report_failure(stats, exc)
            return False
    return True
