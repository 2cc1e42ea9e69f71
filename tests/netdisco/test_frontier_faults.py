"""A shared frontier that fails must end a spider cleanly, never hang its owner.

Real Redis (killed mid-crawl) and a real slow site on loopback.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from aiohttp import web

from netdisco import Crawler, Response, Settings, Spider, SpiderState
from netdisco.engine import SpiderEngine
from netdisco.engine.config import EngineSettings
from netdisco.testing import RedisServer, free_port, serve


@pytest.fixture
async def slow_site() -> AsyncIterator[tuple[str, asyncio.Event]]:
    arrived = asyncio.Event()

    async def slow(request: web.Request) -> web.Response:
        arrived.set()
        await asyncio.sleep(30)
        return web.Response(text="<html></html>", content_type="text/html")

    app = web.Application()
    app.router.add_get("/{path:.*}", slow)
    async with serve(app) as base:
        yield base, arrived


class Slow(Spider):
    name = "slow"

    def parse(self, response: Response) -> Iterator[Any]:
        yield {"url": response.url}


async def test_stop_with_redis_gone_ends_and_closes_the_frontier(
    slow_site: tuple[str, asyncio.Event],
) -> None:
    base, arrived = slow_site
    with RedisServer() as redis:
        settings = Settings(frontier=redis.url, obey_robots=False, concurrency=2)
        crawler = Crawler(Slow(start_urls=[f"{base}/a"]), settings, owner="faults")
        await crawler.start()
        await asyncio.wait_for(arrived.wait(), 20.0)
        redis.stop(signal.SIGKILL)
        state = await asyncio.wait_for(crawler.stop(deadline=0.3), 20.0)
    assert state is SpiderState.STOPPED


async def test_a_spider_whose_frontier_cannot_open_fails_and_the_engine_wait_ends() -> None:
    url = f"redis://127.0.0.1:{free_port()}/0"
    async with SpiderEngine(EngineSettings(port=0, http=False)) as engine:
        await engine.start()
        crawler = engine.add_spider(
            Slow(start_urls=["http://127.0.0.1:1/"]), Settings(frontier=url)
        )
        states = await asyncio.wait_for(engine.wait(), 20.0)
    assert states == {"slow": SpiderState.FAILED}
    assert crawler.stats.last_error is not None
    assert "cannot reach Redis" in crawler.stats.last_error
