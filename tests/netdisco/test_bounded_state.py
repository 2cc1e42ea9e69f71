"""Per-host state stays bounded however many hosts a crawl meets.

The scope cache is fed a million distinct hosts (as links name them) and the size
of what it holds is measured; the download slots and the robots cache are
exercised by a real crawl of 300 virtual hosts through the test site as a proxy.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator

import pytest

from netdisco.crawl.politeness import Politeness
from netdisco.crawl.scheduler import Scope
from netdisco.crawl.settings import Settings
from tests.netdisco.sites import Site, crawl, running_site, seeds

MB = 1024 * 1024


def feed(scope: Scope, start: int, stop: int) -> None:
    for n in range(start, stop):
        host = f"h{n}.links.test"
        scope.reason(f"http://{host}/page", host)


def held_bytes(scope: Scope) -> int:
    """What the scope cache holds: its table and its keys (the values are shared bools)."""
    cache = scope._hosts._data
    return sys.getsizeof(cache) + sum(sys.getsizeof(host) for host in cache)


def test_a_million_hosts_in_links_keep_the_scope_cache_bounded() -> None:
    size = Settings().host_cache_size
    scope = Scope(["example.org"], [], [], size)
    feed(scope, 0, size)  # the cache fills up: the default holds 50k hosts
    full = held_bytes(scope)
    feed(scope, size, 1_000_000)  # 900k more hosts: nothing may grow
    assert len(scope._hosts) == size
    assert full < 25 * MB
    # the table settles at a size made for churn (measured with 100k: 15.7 MB full, 21.8 MB from
    # 200k hosts on, the same at 1M and 2M); unbounded, 1M hosts held over 100 MB
    assert held_bytes(scope) < 25 * MB
    assert scope.reason("http://a.example.org/", "a.example.org") is None  # still decides


@pytest.fixture
async def site() -> AsyncIterator[Site]:
    async with running_site() as served:
        yield served


async def test_slots_and_robots_are_bounded_in_a_crawl_of_many_hosts(site: Site) -> None:
    hosts = [f"h{n}.many.test" for n in range(300)]
    pages = [
        "http://start.many.test/page?" + "&".join(f"link=http://{h}/tree/14" for h in hosts[i::10])
        for i in range(10)
    ]
    spider = seeds(*pages)
    crawler, items = await crawl(
        spider, proxies=(site.base,), host_cache_size=16, robots_cache_size=8, concurrency=8
    )
    assert len(items) == 310  # every host was crawled, its robots.txt asked
    assert site.count("/robots.txt") >= 301
    assert isinstance(crawler.politeness, Politeness)
    assert len(crawler.politeness.hosts) <= 16
    assert crawler.downloader.robots is not None
    assert len(crawler.downloader.robots) <= 8
