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

from netdisco._tasks import wait_event

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
    _work: asyncio.Event = field(default_factory=asyncio.Event, repr=False)
    _idle: int = 0

    def notify(self) -> None:
        """Wake idle workers: there is new work, or the crawl may be over."""
        if self._idle:
            self._work.set()
            self._work = asyncio.Event()

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
        """Sleep until ``notify`` or ``timeout`` s (a shared frontier is polled)."""
        event = self._work
        self._idle += 1
        try:
            await wait_event(event, timeout)
        finally:
            self._idle -= 1
