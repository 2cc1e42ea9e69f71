"""What every stage of one crawl shares: one typed object instead of callbacks.

The crawler makes one ``CrawlContext`` and hands it to the scheduler, the
downloader, the scraper and the acknowledgements. Through it they read the spider,
its settings and counters and the frontier, and they tell the workers the news:
new work was queued (``notify``), the crawl is over (``finish``) or cannot go on
(``fail``).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from netdisco.crawl.request import Request
    from netdisco.crawl.settings import Settings
    from netdisco.crawl.spider import Spider
    from netdisco.crawl.stats import Stats
    from netdisco.frontiers import Frontier


@dataclass(eq=False)
class CrawlContext:
    """The spider, its settings, counters and frontier, and the crawl's run signals."""

    spider: Spider
    settings: Settings
    stats: Stats
    frontier: Frontier[Request]
    #: why the crawl must end failed (the first reason given to ``fail``)
    failure: Exception | None = None
    #: set by ``finish``: the workers take no more requests
    finished: bool = False
    #: idle workers' wake-ups, the latest last (``notify`` wakes the latest first)
    _waiters: dict[asyncio.Future[None], None] = field(default_factory=dict, repr=False)

    def notify(self, count: int | None = None) -> None:
        """Wake idle workers: there is new work, or the crawl may be over. ``count``: as
        many as there are new requests (waking all for one request costs every idle
        worker a turn of the loop, at every page)."""
        left = len(self._waiters) if count is None else count
        while left > 0 and self._waiters:
            waiter, _ = self._waiters.popitem()
            if not waiter.done():
                waiter.set_result(None)
                left -= 1

    def finish(self) -> None:
        """The crawl is over: workers stop taking requests."""
        self.finished = True
        self.notify()

    def fail(self, exc: Exception) -> None:
        """End the crawl failed: the frontier or the acknowledgements cannot go on."""
        if self.failure is None:
            self.failure = exc
        self.finish()

    async def wait_for_work(self, timeout: float) -> None:
        """Sleep until ``notify`` wakes this worker or ``timeout`` s pass (a shared
        frontier is polled)."""
        waiter = asyncio.get_running_loop().create_future()
        self._waiters[waiter] = None
        try:
            async with asyncio.timeout(timeout):  # passes a cancellation on (``wait_event``)
                await waiter
        except TimeoutError:
            pass
        finally:
            self._waiters.pop(waiter, None)
