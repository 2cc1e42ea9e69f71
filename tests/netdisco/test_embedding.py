"""An engine inside an application: on-demand crawls, keep-alive spiders, errors made visible.

Against the engine tests' real site on loopback (``engine_site``): every crawl fetches
real pages over HTTP; standalone engines (no ZooKeeper) on a free port.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from functools import partial
from typing import Any

import aiohttp
import pytest

from netdisco import CallablePipeline, Request, Response, Spider, SpiderState
from netdisco.engine import EngineSettings, SpiderEngine
from netdisco.testing import eventually
from tests.netdisco.engine_site import PAGES


class TitleSpider(Spider):
    """One item per URL it is given, no links followed: each crawl's items are its own."""

    name = "title"
    allowed_domains = ("127.0.0.1",)

    def parse(self, response: Response) -> Iterator[Any]:
        yield {"url": response.url, "title": response.css("h1::text").get()}


class FollowingSpider(TitleSpider):
    name = "following"

    def parse(self, response: Response) -> Iterator[Any]:
        yield from super().parse(response)
        for href in response.css("a::attr(href)").getall():
            yield response.follow(href, callback=self.parse)


def contains(items: list[Any], url: str) -> bool:
    return any(item["url"] == url for item in items)


@pytest.fixture
async def engine() -> AsyncIterator[SpiderEngine]:
    async with SpiderEngine(EngineSettings(id="embedded", port=0)) as running:
        await running.start()
        yield running


def page(site: str, number: int) -> str:
    return f"{site}/fast/p/{number}"


async def test_ten_on_demand_crawls_in_a_row_each_with_its_items(engine, site):
    for number in range(10):
        result = await engine.crawl(TitleSpider, [page(site, number)])
        assert result.state is SpiderState.FINISHED, result
        assert result.items == [{"url": page(site, number), "title": f"Page {number}"}]
        assert result.ok
        assert result.pages == 1
        assert result.name.startswith("title-")
    assert engine.crawlers() == []  # each awaited crawl left the engine


async def test_three_on_demand_crawls_at_once_keep_their_items_apart(engine, site):
    asked = {0: [1, 2, 3], 1: [10, 11], 2: [20, 21, 22, 23]}
    handles = {
        key: engine.crawl(TitleSpider, [page(site, n) for n in numbers])
        for key, numbers in asked.items()
    }
    assert len({h.name for h in handles.values()}) == 3
    results = dict(zip(handles, await asyncio.gather(*handles.values()), strict=True))
    for key, numbers in asked.items():
        got = sorted(item["url"] for item in results[key].items)
        assert got == sorted(page(site, n) for n in numbers), key
        assert results[key].state is SpiderState.FINISHED


async def test_on_demand_crawl_follows_links_within_its_own_run(engine, site):
    result = await engine.crawl(FollowingSpider, [page(site, 0)], {"max_pages": 15})
    assert len({item["url"] for item in result.items}) == result.pages >= 15
    assert result.state is SpiderState.FINISHED


async def test_on_demand_crawl_refuses_bad_input_clearly(engine, site):
    from netdisco import ConfigError

    with pytest.raises(ConfigError, match="urls"):
        engine.crawl(TitleSpider, [])
    with pytest.raises(ConfigError, match="spider class"):
        engine.crawl(TitleSpider(), [page(site, 1)])


async def test_keep_alive_spider_takes_pushes_until_told_to_finish(engine, site):
    items: list[Any] = []
    engine.add_spider(
        TitleSpider(name="live", start_urls=[page(site, 1)]),
        pipelines=[CallablePipeline(items.append)],
        keep_alive=True,
    )
    await eventually(lambda: len(items) == 1, "the seed crawled")
    crawler = engine.crawler("live")
    with pytest.raises(TimeoutError):  # idle and empty past the workers' poll: no finish
        await asyncio.wait_for(asyncio.shield(crawler.phase.ended()), 1.0)
    assert crawler.state is SpiderState.RUNNING
    for number in (5, 6):
        result = await engine.push("live", [page(site, number)])
        assert result.accepted == [page(site, number)]
        await eventually(partial(contains, items, page(site, number)), "the pushed page")
    assert crawler.status()["keep_alive"] is True
    engine.finish("live")
    assert await asyncio.wait_for(crawler.wait(), 20) is SpiderState.FINISHED
    assert len(items) == 3


class BrokenStart(TitleSpider):
    name = "broken_start"

    def start_requests(self) -> Iterator[Request]:
        yield Request(self.start_urls[0], callback=self.parse)
        raise RuntimeError("the seed list is gone")


async def test_a_start_requests_that_raises_fails_the_spider_and_run_says_so(site):
    engine = SpiderEngine(EngineSettings(id="seeds", port=0))
    engine.add_spider(BrokenStart(start_urls=[page(site, 1)]))
    states = await asyncio.wait_for(engine.run(), 40)
    assert states == {"broken_start": SpiderState.FAILED}
    status = engine.spider_status("broken_start")
    assert status["errors_by_type"]["callback"] == {"RuntimeError": 1}
    assert "start()" in (status["last_error"] or "")


class RaisingCallback(TitleSpider):
    name = "raising"

    def parse(self, response: Response) -> Iterator[Any]:
        number = int(response.url.rsplit("/", 1)[1])
        if number % 2:
            raise KeyError(number)
        yield {"number": number}


def fussy_pipeline(item: dict[str, Any]) -> dict[str, Any]:
    if item["number"] % 4 == 0:
        raise ValueError("multiples of four are not welcome")
    return item


async def test_callback_and_pipeline_errors_counted_by_type_in_metrics(engine, site):
    urls = [page(site, n) for n in range(8)]  # 4 odd: KeyError; 0 and 4: ValueError
    handle = engine.crawl(
        RaisingCallback, urls, pipelines=[CallablePipeline(fussy_pipeline)], keep=True
    )
    result = await handle
    assert result.errors == {"callback": {"KeyError": 4}, "pipeline": {"ValueError": 2}}
    assert not result.ok
    status = engine.spider_status(handle.name)
    assert status["errors_by_type"] == result.errors
    assert status["callback_errors"] == 4
    assert status["pipeline_errors"] == 2
    url = f"http://127.0.0.1:{engine.port}/metrics"
    async with aiohttp.ClientSession() as session, session.get(url) as resp:
        text = await resp.text()
    spider = handle.name
    assert f'netdisco_callback_errors_total{{spider="{spider}",type="KeyError"}} 4.0' in text
    assert f'netdisco_pipeline_errors_total{{spider="{spider}",type="ValueError"}} 2.0' in text
    assert PAGES > 8


async def test_an_on_demand_crawl_of_an_engine_stopped_before_it_started_ends(site):
    engine = SpiderEngine(EngineSettings(id="never", port=0))
    handle = engine.crawl(TitleSpider, [page(site, 1)])
    await engine.stop()  # never started: the crawl never ran, and its handle says so
    result = await asyncio.wait_for(handle.result(), 10)
    assert (result.state, result.items, result.ok) == (SpiderState.IDLE, [], False)
