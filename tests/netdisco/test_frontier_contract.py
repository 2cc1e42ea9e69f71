"""The same spider gives the same crawl on every frontier.

One site, crawled on the memory frontier, a ``state_dir`` (SQLite), Redis with engine
politeness, Redis with owned hosts and a Redis Cluster (owned hosts): the pages fetched
(counted at the server), the items written, the duplicates dropped, a redirect to a page already
queued, robots.txt, ``depth_limit``, ``max_pages`` and a rerun must be the same on
each. A frontier that skipped an ability (a ``claim`` that says every redirect
target is new, say) shows up here as one column that differs.
"""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from netdisco import Crawler, Request, Response, Settings, Spider
from netdisco.testing import RedisClusterServer, RedisServer, serve
from tests.netdisco.sites import html

LINKS: dict[str, list[str]] = {
    "/": ["/a", "/b", "/a#top", "/private/p", "/deep1", "/c"],
    "/a": ["/b", "/", "/old"],
    "/b": ["/a", "/b?"],
    "/c": ["/moved"],
    "/deep1": ["/deep2"],
    "/deep2": ["/deep3"],  # depth 3: over depth_limit 2
    "/deep3": ["/deep4"],
    "/new": [],
}
#: /old is linked from /a after / queued /b: its redirect lands on a page already queued
REDIRECTS = {"/old": "/b", "/moved": "/new"}
ROBOTS = "User-agent: *\nDisallow: /private/\n"
#: what every frontier must fetch and emit
PAGES = {"/", "/a", "/b", "/c", "/new", "/deep1", "/deep2"}

KINDS = ["memory", "sqlite", "redis", "owned", "cluster"]


def site_app(hits: Counter[str]) -> web.Application:
    async def page(request: web.Request) -> web.StreamResponse:
        hits[request.path_qs if request.query_string else request.path] += 1
        if request.path == "/robots.txt":
            return web.Response(text=ROBOTS)
        if request.path in REDIRECTS:
            raise web.HTTPMovedPermanently(REDIRECTS[request.path])
        return html(request.path, *LINKS.get(request.path, []))

    app = web.Application()
    app.router.add_get("/{path:.*}", page)
    return app


class Linked(Spider):
    name = "contract"

    def __init__(self, base: str) -> None:
        super().__init__()
        self.base = base

    async def start(self) -> AsyncIterator[Request]:
        yield Request(self.base + "/")

    def parse(self, response: Response) -> Any:
        yield {"url": response.url.removeprefix(self.base)}
        yield from response.follow_all(css="a")


def linked(base: str, name: str = "") -> Linked:
    """A ``Linked`` spider of a crawl of its own (or of the crawl ``name``)."""
    kind: type[Linked] = type(
        "Linked", (Linked,), {"name": name or f"contract-{uuid.uuid4().hex[:8]}"}
    )
    return kind(base)


@pytest.fixture(scope="module")
def redis_cluster() -> Iterator[RedisClusterServer]:
    with RedisClusterServer(node_timeout_ms=1000) as server:
        yield server


@pytest.fixture(params=KINDS)
def frontier_settings(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[dict[str, Any]]:
    """The settings that pick one frontier (a fresh crawl each test)."""
    kind: str = request.param
    prefix = f"t{uuid.uuid4().hex[:10]}"
    if kind == "memory":
        yield {}
    elif kind == "sqlite":
        yield {"state_dir": str(tmp_path / "state")}
    elif kind == "cluster":
        cluster: RedisClusterServer = request.getfixturevalue("redis_cluster")
        yield {"frontier": f"{cluster.url}?prefix={prefix}"}
    else:
        server: RedisServer = request.getfixturevalue("redis_server")
        politeness = "owner" if kind == "owned" else "engine"
        yield {"frontier": f"{server.url}?prefix={prefix}&politeness={politeness}"}


async def crawl(
    base: str, spider: Linked, chosen: dict[str, Any], **extra: Any
) -> tuple[Crawler, list[str]]:
    settings = Settings(
        concurrency=4, depth_limit=2, progress_interval=0, retries=0, **chosen, **extra
    )
    crawler = Crawler(spider, settings)
    items: list[str] = []
    crawler.items.subscribe(lambda item: items.append(item["url"]))
    await crawler.run()
    return crawler, items


async def test_every_frontier_gives_the_same_crawl(frontier_settings: dict[str, Any]) -> None:
    hits: Counter[str] = Counter()
    async with serve(site_app(hits)) as base:
        crawler, items = await crawl(base, linked(base), frontier_settings)
    assert crawler.state.value == "finished", crawler.stats.last_error
    assert Counter(items) == Counter(PAGES)  # each page's item once: no duplicate
    # at the server: robots.txt once, each page once, the redirects once, nothing private
    fetched = {path: n for path, n in hits.items() if path not in ("/robots.txt", *REDIRECTS)}
    assert fetched == dict.fromkeys(PAGES, 1)
    assert (hits["/robots.txt"], hits["/old"], hits["/moved"]) == (1, 1, 1)
    assert crawler.stats.succeeded == len(PAGES)
    assert crawler.stats.robots_blocked == 1  # /private/p
    # /a#top, /b?, / and /b (from /a), /a (from /b): duplicate links; /old -> /b: a
    # duplicate redirect; /deep3: over depth_limit
    assert crawler.stats.filtered == 7


async def test_every_frontier_stops_at_max_pages(frontier_settings: dict[str, Any]) -> None:
    hits: Counter[str] = Counter()
    async with serve(site_app(hits)) as base:
        crawler, items = await crawl(base, linked(base), frontier_settings, max_pages=3)
    assert crawler.stats.succeeded == 3
    assert len(items) == len(set(items)) == 3
    assert sum(n for path, n in hits.items() if path in PAGES) == 3


async def test_a_rerun_resumes_where_the_frontier_keeps_the_crawl(
    frontier_settings: dict[str, Any],
) -> None:
    """A finished crawl run again: the memory frontier starts afresh (nothing outlives
    it); every stored frontier knows its pages and fetches none of them again."""
    hits: Counter[str] = Counter()
    async with serve(site_app(hits)) as base:
        spider = linked(base)
        await crawl(base, spider, frontier_settings)
        first = sum(hits.values())
        again = linked(base, spider.name)  # the same crawl
        crawler, items = await crawl(base, again, frontier_settings)
    assert crawler.state.value == "finished"
    if not frontier_settings:  # memory
        assert Counter(items) == Counter(PAGES)
        return
    assert items == []
    assert sum(hits.values()) == first  # not one request more at the server


class Holding(Linked):
    """Holds the crawl open in ``/hold``'s callback until ``release`` is set, so that its
    failed requests can be retried while it runs."""

    release: asyncio.Event

    async def start(self) -> AsyncIterator[Request]:
        for path in ("/hold", "/missing", "/broken", "/private/p"):
            yield Request(self.base + path)

    async def parse(self, response: Response) -> AsyncIterator[Any]:
        if response.url.endswith("/hold"):
            await self.release.wait()
        yield {"url": response.url.removeprefix(self.base)}


def failing_app(hits: Counter[str], broken: list[int]) -> web.Application:
    async def page(request: web.Request) -> web.StreamResponse:
        hits[request.path] += 1
        if request.path == "/robots.txt":
            return web.Response(text=ROBOTS)
        if request.path == "/missing":
            raise web.HTTPNotFound()
        if request.path == "/broken" and broken:
            broken.pop()
            raise web.HTTPInternalServerError()
        return html(request.path)

    app = web.Application()
    app.router.add_get("/{path:.*}", page)
    return app


async def test_every_frontier_keeps_and_retries_failed_requests(
    frontier_settings: dict[str, Any],
) -> None:
    """404 and 500 (retries spent) are kept with their reason, robots.txt is not; a retry
    of the 500 while the crawl runs fetches it again, past the seen set; a stored
    frontier still lists what is left to a new crawler of the same crawl (a restart, or
    another engine on Redis)."""
    hits: Counter[str] = Counter()
    async with serve(failing_app(hits, [1])) as base:
        spider = type("Holding", (Holding,), {"name": f"failed-{uuid.uuid4().hex[:8]}"})(base)
        spider.release = asyncio.Event()
        settings = Settings(concurrency=4, progress_interval=0, retries=0, **frontier_settings)
        crawler = Crawler(spider, settings)
        items: list[str] = []
        crawler.items.subscribe(lambda item: items.append(item["url"]))
        await crawler.start()
        page = await eventually_page(crawler, 2)
        assert page.by_reason == {"http_404": 1, "http_500": 1}
        assert {(r.url.removeprefix(base), r.method, r.status) for r in page.records} == {
            ("/missing", "GET", 404),
            ("/broken", "GET", 500),
        }
        assert all(r.attempts == 1 and r.last_at > 0 for r in page.records)
        assert await crawler.retry_failed("http_500") == 1
        spider.release.set()
        await crawler.wait()
        assert crawler.state.value == "finished", crawler.stats.last_error
        assert hits["/broken"] == 2
        assert sorted(items) == ["/broken", "/hold"]
        left = await crawler.failures.page(None, 0, 10)  # the frontier is closed now
        assert (left.total, left.by_reason) == (1, {"http_404": 1})
        if frontier_settings:  # memory: nothing outlives the crawler
            again = Crawler(type(spider)(base), settings)
            kept = await again.failures.page(None, 0, 10)
            assert [r.url for r in kept.records] == [base + "/missing"]
            assert await again.failures.delete(None) == 1
        assert await crawler.failures.delete("http_404") == (0 if frontier_settings else 1)


async def eventually_page(crawler: Crawler, total: int) -> Any:
    for _ in range(200):
        page = await crawler.failures.page(None, 0, 10)
        if page.total >= total:
            return page
        await asyncio.sleep(0.05)
    raise AssertionError(f"the failed store holds {page.total} of {total}")
