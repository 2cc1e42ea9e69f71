"""A shared crawl's politeness against a real Redis, counted at the servers: each host
is owned by one engine (``politeness=owner``, the default), which keeps its slots, its
delay and its robots.txt as a standalone crawl does."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from redis import asyncio as aioredis

from netdisco import Crawler, Request, Settings
from netdisco.crawl.crawler import frontier_for
from netdisco.crawl.urls import host_key
from netdisco.exceptions import ConfigError
from netdisco.frontiers.redis import RedisFrontier, RedisOptions
from netdisco.frontiers.redis.owned import OwnedFrontier
from netdisco.frontiers.redis.owners import BUCKETS, bucket_of, winner
from netdisco.frontiers.redis.ownership import RedisMembers
from netdisco.testing import RedisServer
from tests.netdisco.hosts_support import (
    PAGES,
    HostsSpider,
    LoggingHost,
    closest_starts,
    most_in_flight,
    served,
)
from tests.netdisco.redis_support import SiteSpider


@pytest.fixture
def redis_url(redis_server: RedisServer) -> str:
    return f"{redis_server.url}?prefix=h{uuid.uuid4().hex[:10]}&prefetch=1"


def test_the_redis_setting_picks_owned_hosts_unless_told_otherwise() -> None:
    spider = SiteSpider(start_urls=[])
    owned = frontier_for(Settings(frontier="redis://127.0.0.1:1/0"), spider, None)
    assert isinstance(owned, OwnedFrontier)
    alone = frontier_for(Settings(frontier="redis://127.0.0.1:1/0?politeness=engine"), spider, None)
    assert type(alone) is RedisFrontier
    with pytest.raises(ConfigError, match="politeness must be owner or engine"):
        RedisOptions.from_url("redis://127.0.0.1:1/0?politeness=host")
    with pytest.raises(ConfigError, match=r"\(cluster, the host queues of earlier versions"):
        RedisOptions.from_url("redis://127.0.0.1:1/0?politeness=cluster")


async def test_a_redirect_to_another_host_waits_for_a_slot_of_that_host(
    redis_url: str,
) -> None:
    """Twenty pages of host A redirect to pages of host B, which has its own pages too.
    Each hop is queued for B rather than fetched on A's slot, so at B's server no more
    than ``per_host_concurrency`` requests are ever in flight; every page is fetched
    once and yields its item, under the URL it was found at the end of its hops."""
    a, b = LoggingHost(latency=0.05), LoggingHost(latency=0.05)
    async with served(a, "127.0.0.1") as base_a, served(b, "127.0.0.2") as base_b:
        a.redirects = {f"/p{n}.html": f"{base_b}/p{n + 100}.html" for n in range(1, 21)}
        seeds = [f"{base_a}/p{n}.html" for n in range(1, 21)] + [f"{base_b}/p0.html"]
        settings = Settings(
            frontier=redis_url,
            concurrency=16,
            per_host_concurrency=2,
            obey_robots=False,
            progress_interval=0,
        )
        crawler = Crawler(HostsSpider(start_urls=seeds), settings)
        stats = await crawler.run()
    assert most_in_flight(b.visits) <= 2
    assert most_in_flight(a.visits) <= 2
    fetched = [v.path for v in b.visits]
    expected = {f"/p{n}.html" for n in range(PAGES)} | {f"/p{n}.html" for n in range(101, 121)}
    assert sorted(fetched) == sorted(expected)  # each once
    assert (stats.succeeded, stats.failed, stats.items) == (len(expected), 0, len(expected))


def two_owners(*bases: str) -> tuple[str, str]:
    """Two engine names that own the hosts of ``bases`` apart: the first host is the
    first's, the second the second's (rendezvous hashing over the two)."""
    buckets = [bucket_of(host_key(base), BUCKETS) for base in bases]
    for n in range(1000):
        names = (f"e{n}a", f"e{n}b")
        if [winner(b, names) for b in buckets] == list(names):
            return names
    raise AssertionError("no two names own the hosts apart")


async def owned_apart(
    redis_url: str, spider: HostsSpider, *bases: str, **more: Any
) -> tuple[int, int]:
    """``spider`` crawled by two engines in this process, each owning one of the hosts
    from the start (both members before either settles): pages succeeded and failed."""
    names = two_owners(*bases)
    options = RedisOptions.from_url(redis_url)
    async with aioredis.Redis.from_url(options.url) as redis:
        for name in names:
            await RedisMembers(redis, options.prefix, spider.name, name, ttl_ms=60_000).beat()
    settings = Settings(frontier=redis_url, obey_robots=False, progress_interval=0, **more)
    crawlers = [Crawler(spider, settings, owner=name) for name in names]
    both = await asyncio.gather(*(crawler.run() for crawler in crawlers))
    return sum(s.succeeded for s in both), sum(s.failed for s in both)


async def test_a_redirect_to_a_host_another_engine_owns_goes_to_it_and_a_loop_ends(
    redis_url: str,
) -> None:
    """A/p1 -> B/p1 -> A/p1, A and B owned by two engines: each hop is queued for the
    other engine, the hop back is a URL already seen and is dropped, and each host served
    its page once; with ``dont_filter`` (each engine queues its seed: two chains) the
    hops are counted across the engines and ``max_redirects`` ends each loop."""
    a, b = LoggingHost(latency=0.0), LoggingHost(latency=0.0)
    async with served(a, "127.0.0.1") as base_a, served(b, "127.0.0.2") as base_b:
        a.redirects = {"/p1.html": f"{base_b}/p1.html"}
        b.redirects = {"/p1.html": f"{base_a}/p1.html"}
        seeds = [f"{base_a}/p1.html"]
        ended = await owned_apart(redis_url, HostsSpider(start_urls=seeds), base_a, base_b)
        assert ([v.path for v in a.visits], [v.path for v in b.visits]) == (["/p1.html"],) * 2
        assert ended == (0, 0)  # one engine would follow the hop back: a loop, failed
        a.visits.clear()
        b.visits.clear()
        looping = redis_url.replace("prefix=", "prefix=loop")
        spider = Unfiltered(start_urls=seeds)
        ended = await owned_apart(looping, spider, base_a, base_b, max_redirects=3)
    assert (len(a.visits), len(b.visits)) == (4, 4)  # hops 1, 2, 3 made; the 4th refused
    assert ended == (0, 2)


class Unfiltered(HostsSpider):
    """Its seeds skip the seen set (``dont_filter``), and so do their redirect hops."""

    async def start(self) -> AsyncIterator[Request]:
        for url in self.start_urls:
            yield Request(url, callback=self.parse, dont_filter=True)


async def test_the_page_after_a_robots_fetch_waits_the_delay(redis_url: str) -> None:
    """robots.txt is fetched inside the first page's slot; it is a request to the host
    too, so at the server that page starts no sooner than the delay after it."""
    delay = 0.3
    site = LoggingHost(latency=0.01)
    async with served(site, "127.0.0.1") as base:
        settings = Settings(frontier=redis_url, download_delay=delay, progress_interval=0)
        spider = HostsSpider(start_urls=[f"{base}/p{n}.html" for n in range(3)])
        stats = await Crawler(spider, settings).run()
    assert stats.succeeded == PAGES - 1  # the last page is disallowed
    assert len(site.robots_visits) == 1
    assert closest_starts(site.visits + site.robots_visits) >= delay
