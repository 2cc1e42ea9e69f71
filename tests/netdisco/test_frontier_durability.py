"""Issue 11: a shared crawl survives a Redis that restarts on its AOF, a Redis that lost
the crawl fails every spider on it (never ``finished``), an old acknowledgement never
deletes another request, and items are acknowledged only once flushed.

Real Redis servers (SIGKILLed, restarted with and without AOF), a counting site on
loopback and real crawlers.
"""

from __future__ import annotations

import asyncio
import json
import signal
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from redis import asyncio as aioredis

from netdisco import Crawler, Request, Response, Spider, SpiderState
from netdisco.crawl.acks import return_parked
from netdisco.crawl.codec import RequestCodec
from netdisco.crawl.pipelines import JsonLinesPipeline, Pipeline
from netdisco.exceptions import CrawlLost
from netdisco.frontiers import MemoryFrontier
from netdisco.frontiers.redis import RedisFrontier, RedisOptions
from netdisco.testing import RedisServer, eventually
from tests.netdisco.conftest import PAGES
from tests.netdisco.redis_support import SiteServer, crawl_settings, make_request, site_spider


async def restart(server: RedisServer, sig: int) -> None:
    """Stop Redis with ``sig`` and start it again on the same port and directory."""
    await asyncio.to_thread(server.stop, sig)
    await asyncio.to_thread(server.start)


async def aof_written(url: str) -> bool:
    """Whether Redis holds no AOF buffer that it has not written to its file yet."""
    client = aioredis.Redis.from_url(url)
    try:
        info = await client.info("persistence")
    finally:
        await client.aclose()
    return bool(info["aof_enabled"] == 1 and info["aof_buffer_length"] == 0)


def crawler_on(url: str, base: str) -> Crawler:
    spider = site_spider(base)
    frontier = RedisFrontier(RedisOptions.from_url(url), spider.name, RequestCodec(spider))
    return Crawler(spider, crawl_settings(url, concurrency=8), frontier=frontier)


@pytest.mark.slow
async def test_redis_restarted_empty_fails_the_spider_with_one_clear_error(
    counting_site: SiteServer,
) -> None:
    with RedisServer() as server:  # no persistence: a restart loses everything
        crawler = crawler_on(server.url, counting_site.base)
        await crawler.start()
        await eventually(lambda: counting_site.fetched >= 200, "200 pages")
        await restart(server, signal.SIGTERM)
        assert await asyncio.wait_for(crawler.wait(), 60) is SpiderState.FAILED
    assert counting_site.fetched < PAGES
    error = crawler.stats.last_error or ""
    assert f"Redis at {server.url} lost the crawl of spider 'gensite'" in error
    assert "holds no crawl" in error


@pytest.mark.slow
async def test_redis_sigkilled_and_restarted_on_its_aof_loses_no_page(
    counting_site: SiteServer,
) -> None:
    with RedisServer(appendonly=True, appendfsync="everysec") as server:
        crawler = crawler_on(server.url, counting_site.base)
        await crawler.start()
        await eventually(lambda: counting_site.fetched >= PAGES // 2, "half the site")
        # the crawl's creation is in the AOF file: Redis wrote out its buffer since (a
        # SIGKILL keeps what was written; fsync is for the machine's crash, not ours)
        await eventually(lambda: aof_written(server.url), "the AOF written out")
        await restart(server, signal.SIGKILL)
        assert await asyncio.wait_for(crawler.wait(), 300) is SpiderState.FINISHED
    assert counting_site.fetched == PAGES
    assert crawler.stats.last_error is None or "lost" not in crawler.stats.last_error


async def test_an_old_ack_after_a_rollback_never_deletes_another_request(
    redis_server: RedisServer,
) -> None:
    """Redis loses the add and take of ``first`` (AOF rollback: the sequence restarts);
    the id ``second`` then gets must differ, or our late ack would delete it."""
    spider = site_spider("http://127.0.0.1:1")
    url = f"{redis_server.url}?prefix=r{uuid.uuid4().hex[:10]}&prefetch=1"
    frontier = RedisFrontier(RedisOptions.from_url(url), spider.name, RequestCodec(spider))
    client = aioredis.Redis.from_url(redis_server.url)
    try:
        await frontier.add([make_request(spider, "http://127.0.0.1:1/first")])
        first = await frontier.take()
        assert first is not None
        k = frontier.keys
        await client.delete(k.seen, k.queue, k.payload, k.seq, k.leases, k.owner)
        await frontier.add([make_request(spider, "http://127.0.0.1:1/second")])
        await frontier.done(first)
        await frontier.flush()
        assert (await frontier.counts())[0] == 1
        second = await frontier.take()
        assert second is not None
        assert second.url.endswith("/second")
    finally:
        await client.aclose()
        await frontier.close()


async def test_flushall_makes_every_operation_raise_crawl_lost(redis_server: RedisServer) -> None:
    spider = site_spider("http://127.0.0.1:1")
    url = f"{redis_server.url}?prefix=f{uuid.uuid4().hex[:10]}"
    frontier = RedisFrontier(RedisOptions.from_url(url), spider.name, RequestCodec(spider))
    client = aioredis.Redis.from_url(redis_server.url)
    try:
        await frontier.add([make_request(spider, "http://127.0.0.1:1/a")])
        await client.delete(*await client.keys(f"{frontier.options.prefix}:*"))
        with pytest.raises(CrawlLost, match="holds no crawl"):
            await frontier.take()
        with pytest.raises(CrawlLost):
            await frontier.counts()
        with pytest.raises(CrawlLost):
            await frontier.add([make_request(spider, "http://127.0.0.1:1/b")])
    finally:
        await client.aclose()
        await frontier.close()


class Recorded(MemoryFrontier[Request]):
    """The memory frontier, noting the order of acknowledgements."""

    def __init__(self, log: list[str]) -> None:
        super().__init__()
        self.log = log

    async def done(self, request: Request, *, requeue: bool = False) -> None:
        if not requeue:
            self.log.append(f"ack {request.url}")
        await super().done(request, requeue=requeue)


class SlowFlush(Pipeline):
    """Notes every item and every flush; its flush takes a while, as a disk's may."""

    def __init__(self, log: list[str]) -> None:
        self.log = log

    def process(self, item: Any) -> None:
        self.log.append(f"item {item['url']}")

    async def flush(self) -> None:
        await asyncio.sleep(0.05)
        self.log.append("flush")


class OnePage(Spider):
    name = "onepage"

    def parse(self, response: Response) -> Iterator[Any]:
        yield {"url": response.url}


async def test_a_request_is_acknowledged_only_after_its_items_are_flushed(
    counting_site: SiteServer,
) -> None:
    log: list[str] = []
    urls = [f"{counting_site.base}/index.html", f"{counting_site.base}/p/000/page-00001.html"]
    spider = OnePage(start_urls=urls)
    crawler = Crawler(spider, frontier=Recorded(log), pipelines=[SlowFlush(log)])
    await crawler.run()
    assert crawler.state is SpiderState.FINISHED
    for url in urls:
        item, ack = log.index(f"item {url}"), log.index(f"ack {url}")
        assert "flush" in log[item:ack]


async def test_json_lines_are_appended_and_flushed_lines_survive(tmp_path: Path) -> None:
    path = tmp_path / "items.jl"
    path.write_text('{"earlier": 1}\n{"cut sho')  # a run killed mid-line
    pipeline = JsonLinesPipeline(path)
    await pipeline.open()
    pipeline.process({"n": 1})
    await pipeline.flush()
    assert path.read_text() == '{"earlier": 1}\n{"cut sho\n{"n": 1}\n'  # before close
    pipeline.process([{"n": 2}, {"n": 3}])
    await pipeline.close()
    lines = path.read_text().splitlines()
    assert [json.loads(line) for line in lines[2:]] == [{"n": 1}, {"n": 2}, {"n": 3}]
    overwrite = JsonLinesPipeline(path, overwrite=True)
    await overwrite.open()
    overwrite.process({"n": 4})
    await overwrite.close()
    assert path.read_text() == '{"n": 4}\n'


async def test_parked_requests_go_back_in_one_batch_under_one_deadline() -> None:
    """With Redis gone, 64 parked requests once took 72 s at a 1 s deadline (one each)."""
    spider = site_spider("http://127.0.0.1:1")
    with RedisServer() as server:
        frontier = RedisFrontier(
            RedisOptions.from_url(server.url), spider.name, RequestCodec(spider)
        )
        await frontier.add([make_request(spider, f"http://127.0.0.1:1/{i}") for i in range(64)])
        taken = [await frontier.take() for _ in range(64)]
        server.stop(signal.SIGKILL)
        parked = [request for request in taken if request is not None]
        assert len(parked) == 64
        # the whole batch gets the one 1 s deadline; 64 of them one by one would take minutes
        await asyncio.wait_for(return_parked(frontier, parked, 1.0), timeout=20)
        await frontier.close(hand_back=False)
