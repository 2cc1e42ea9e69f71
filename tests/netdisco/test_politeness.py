"""A busy host does not hold the workers: its requests wait aside while others proceed.

Two real servers on loopback (two ports, so two hosts): one answers after 0.5 s (or
only when the test lets it), one at once. With one request at a time per host, the
slow host's queue must not keep the fast host's pages waiting.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from aiohttp import web

from netdisco import Crawler, Request, Response, Settings, Spider
from netdisco.testing import eventually, serve


class Host:
    """Serves any path, after ``delay``, and while ``gate`` is set (if there is one);
    remembers when each request arrived."""

    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.gate: asyncio.Event | None = None
        self.arrivals: dict[str, float] = {}
        self.first = asyncio.Event()
        self.base = ""

    async def handle(self, request: web.Request) -> web.Response:
        self.arrivals[request.path] = time.monotonic()
        self.first.set()
        if self.gate is not None:
            await self.gate.wait()
        await asyncio.sleep(self.delay)
        return web.Response(text="<html><body>page</body></html>", content_type="text/html")

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/{path:.*}", self.handle)
        return app


@pytest.fixture
async def hosts() -> AsyncIterator[tuple[Host, Host]]:
    slow, fast = Host(0.5), Host(0.0)
    async with serve(slow.app()) as slow.base, serve(fast.app()) as fast.base:
        yield slow, fast


class TwoHosts(Spider):
    name = "two-hosts"

    def __init__(self, slow: str, fast: str) -> None:
        super().__init__()
        self.slow, self.fast = slow, fast

    async def start(self) -> AsyncIterator[Request]:
        for n in range(4):  # the slow host's pages come first in the queue
            yield Request(f"{self.slow}/slow-{n}", callback=self.parse)
        for n in range(12):
            yield Request(f"{self.fast}/fast-{n}", callback=self.parse)

    def parse(self, response: Response) -> Iterator[Any]:
        yield {"url": response.url}


async def gated_crawl(slow: Host, fast: Host, *crawlers: Crawler) -> None:
    """Run ``crawlers`` while the slow host holds its first request until every fast
    page has arrived: the fast pages must not wait for it (the order holds by
    construction; a crawl whose workers the slow host held fails by the deadline)."""
    slow.gate, slow.delay = asyncio.Event(), 0.0
    for crawler in crawlers:
        await crawler.start()
    try:
        await eventually(lambda: len(fast.arrivals) == 12, "every fast page", timeout=30)
        assert len(slow.arrivals) == 1  # one slow request at a time, still held
    finally:
        slow.gate.set()
        for crawler in crawlers:
            await asyncio.wait_for(crawler.wait(), 60)


async def test_a_busy_host_does_not_hold_the_workers(hosts: tuple[Host, Host]) -> None:
    slow, fast = hosts
    settings = Settings(concurrency=4, per_host_concurrency=1, obey_robots=False)
    crawler = Crawler(TwoHosts(slow.base, fast.base), settings)
    await gated_crawl(slow, fast, crawler)
    assert crawler.stats.succeeded == 16
    assert crawler.downloader.drain() == []


async def test_parked_requests_go_back_to_the_frontier_on_stop(hosts: tuple[Host, Host]) -> None:
    slow, _ = hosts
    settings = Settings(concurrency=4, per_host_concurrency=1, obey_robots=False)
    crawler = Crawler(TwoHosts(slow.base, slow.base), settings)
    await crawler.start()
    await asyncio.wait_for(slow.first.wait(), 10.0)
    await crawler.stop(deadline=5.0)
    queued, leased, _ = await crawler.frontier.counts()
    assert leased == 0
    assert queued + crawler.stats.succeeded == 16
