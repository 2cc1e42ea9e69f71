"""A generated site that counts fetches, its spider, and an engine process on Redis.

The engine process is what ``netdisco engine`` will run once it wires the Redis
frontier: a ``Crawler`` on a ``RedisFrontier`` leased to its incarnation, a
ZooKeeper ``Registration`` and a ``LeaseRecovery``. SIGTERM stops it gracefully
in the engine's order (deregister, stop the crawl, hand leases back).

Usage: python -m tests.netdisco.redis_support REDIS_URL ZK_HOSTS BASE_URL ENGINE_ID
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import structlog
from aiohttp import web

from netdisco import Crawler, Request, Response, Settings, Spider
from netdisco.cluster.contract import CONTRACT, payload_from_dict
from netdisco.cluster.registry import Registration
from netdisco.cluster.settings import ZooKeeperSettings
from netdisco.crawl.codec import RequestCodec
from netdisco.frontiers.redis import RedisFrontier, RedisOptions
from netdisco.frontiers.redis.recovery import lease_recovery
from tests.netdisco.sites import LoopbackServer

SESSION_TIMEOUT = 2.0


class SiteServer(LoopbackServer):
    """Serves a generated site from memory and counts every page fetched."""

    def __init__(self, root: Path, delay: float = 0.0) -> None:
        self.pages = {
            "/" + str(p.relative_to(root)): p.read_bytes()
            for p in root.rglob("*.html")
            if "_meta" not in p.parts
        }
        self.delay = delay
        self.fetches: Counter[str] = Counter()

    async def _handle(self, request: web.BaseRequest) -> web.StreamResponse:
        if request.path == "/robots.txt":
            return web.Response(text="User-agent: *\nAllow: /\n")
        body = self.pages.get(request.path)
        if body is None:
            return web.Response(status=404)
        self.fetches[request.path] += 1
        if self.delay:
            await asyncio.sleep(self.delay)
        return web.Response(body=body, content_type="text/html")

    @property
    def fetched(self) -> int:
        return len(self.fetches)

    @property
    def duplicates(self) -> int:
        return sum(n - 1 for n in self.fetches.values())


class SiteSpider(Spider):
    """Follows every link of the generated site; one item per page."""

    name = "gensite"
    allowed_domains = ("127.0.0.1",)

    def parse(self, response: Response) -> Iterator[Any]:
        yield {"url": response.url}
        for href in response.css("a::attr(href)").getall():
            yield response.follow(href, callback=self.parse, errback=self.failed)

    def failed(self, request: Request, error: BaseException) -> None:
        """An errback, so that errbacks travel between engines too."""


def site_spider(base: str) -> SiteSpider:
    return SiteSpider(start_urls=[f"{base}/index.html"])


def crawl_settings(url: str, concurrency: int = 16) -> Settings:
    return Settings(frontier=url, concurrency=concurrency, progress_interval=0, retries=0)


async def engine(redis_url: str, zk_hosts: str, base: str, engine_id: str) -> dict[str, Any]:
    """One engine: crawl until the frontier is drained or SIGTERM; report as JSON."""
    incarnation = uuid.uuid4().hex
    spider = site_spider(base)
    frontier = RedisFrontier(
        RedisOptions.from_url(redis_url), spider.name, RequestCodec(spider), owner=incarnation
    )
    crawler = Crawler(spider, crawl_settings(redis_url), frontier=frontier)
    zk = ZooKeeperSettings(hosts=zk_hosts, session_timeout=SESSION_TIMEOUT, audit_interval=1.0)
    data = {
        "id": engine_id,
        "incarnation": incarnation,
        "pid": os.getpid(),
        "spiders": [],
        "contract": CONTRACT,
    }  # as engines write: a leave is told by its tombstone
    registration = Registration(zk, engine_id, lambda: payload_from_dict(data))
    recovery = lease_recovery(redis_url, zk, incarnation)
    await frontier.open()
    await registration.start()
    await recovery.start()
    for _ in range(1000):  # registered before crawling, so that a loss is seen
        if registration.healthy:
            break
        await asyncio.sleep(0.02)
    print(json.dumps({"event": "ready", "incarnation": incarnation}), flush=True)
    stopping = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stopping.set)
    await crawler.start()
    await _until_done_or_stopped(crawler, registration, stopping)
    await frontier.close()
    await recovery.stop()
    return {
        "event": "done",
        "state": crawler.state.value,
        "pages": crawler.stats.succeeded,
        "handed_back": frontier.handed_back,
        "round_trips": frontier.round_trips,
        "recoveries": [r.__dict__ for r in recovery.recoveries],
    }


async def _until_done_or_stopped(
    crawler: Crawler, registration: Registration, stopping: asyncio.Event
) -> None:
    """Crawl to the end, or on SIGTERM stop in the engine's order: deregister, then stop."""
    stopper = asyncio.create_task(stopping.wait())
    await asyncio.wait(
        [stopper, asyncio.create_task(crawler.wait())], return_when="FIRST_COMPLETED"
    )
    if stopping.is_set():
        await registration.stop()
        await crawler.stop(deadline=10.0)
    else:
        stopper.cancel()
        await registration.stop()


def run_engine(argv: list[str]) -> None:
    """Logs go to stderr: stdout carries the JSON lines the test reads."""
    structlog.configure(logger_factory=structlog.PrintLoggerFactory(sys.stderr))
    result = asyncio.run(engine(*argv))
    print(json.dumps(result), flush=True)


def make_request(spider: SiteSpider, url: str, **kwargs: Any) -> Request:
    from netdisco.crawl.scheduler import fingerprint

    request = Request(url, callback=spider.parse, **kwargs)
    request.fingerprint = fingerprint(request)
    return request


if __name__ == "__main__":
    run_engine(sys.argv[1:])


_GEN_SPIDER = """
from netdisco import Spider
from netdisco.crawl.pipelines import JsonLinesPipeline

class Gen(Spider):
    name = "gensite"
    allowed_domains = ["127.0.0.1"]
    start_urls = ["{base}/index.html"]

    def pipelines(self):
        return [JsonLinesPipeline({output!r})] if {output!r} else []

    def parse(self, response):
        yield {{"url": response.url}}
        for href in response.css("a::attr(href)").getall():
            yield response.follow(href, callback=self.parse)
"""


def gen_spider_source(base: str, output: str | None = None) -> str:
    """A spider file (class ``Gen``) that crawls the generated site at ``base``.

    With ``output``, the spider itself writes its items there as JSON lines.
    """
    return _GEN_SPIDER.format(base=base, output=output or "")
