"""A shared frontier that fails must end a spider cleanly, never hang its owner.

Real Redis (killed mid-crawl) and a real slow site on loopback.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from redis import asyncio as aioredis

from netdisco import Crawler, Response, Settings, Spider, SpiderState
from netdisco.engine import SpiderEngine
from netdisco.engine.config import EngineSettings
from netdisco.testing import RedisServer, eventually, free_port, serve, write_site
from tests.netdisco.redis_support import SiteServer, crawl_settings, site_spider


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


async def test_redis_refusing_writes_fails_the_crawl_and_loses_no_page(tmp_path: Path) -> None:
    """Redis out of memory mid-crawl refuses every write: the crawl ends ``failed``
    naming the refusal, and no page is acknowledged as failed without its links (it
    was: a refused add counted as the page's download error). With memory back, the
    same command crawls every page of the site."""
    site = SiteServer(write_site(tmp_path / "site", 300), delay=0.005)
    base = await site.start()
    try:
        with RedisServer() as redis:
            url = f"{redis.url}?prefix=oom&lease_ttl=2"
            client = aioredis.Redis.from_url(redis.url)
            first = Crawler(site_spider(base), crawl_settings(url, concurrency=4))
            running = asyncio.create_task(first.run())
            await eventually(lambda: site.fetched >= 30, "the crawl under way")
            await client.config_set("maxmemory", "1")
            stats = await asyncio.wait_for(running, 60)
            assert first.state is SpiderState.FAILED
            assert "maxmemory" in str(stats.last_error)  # the refusal, named
            assert site.fetched < len(site.pages)
            await client.config_set("maxmemory", "0")
            again = Crawler(site_spider(base), crawl_settings(url, concurrency=4))
            await asyncio.wait_for(again.run(), 120)
            await client.aclose()
        assert again.state is SpiderState.FINISHED
        assert site.fetched == len(site.pages)  # every page, none lost
    finally:
        await site.stop()
