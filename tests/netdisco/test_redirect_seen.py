"""``response.url`` without fragment, and redirect targets checked against the seen set."""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

from aiohttp import web

from netdisco import Crawler, Request, Response, Settings, Spider
from netdisco.testing import serve
from tests.netdisco.sites import linking_app

LINKS = {
    "/": ["/a#top", "/a#bottom", "/old", "/moved"],
    "/a": ["/b", "/new"],
    "/b": [],
    "/new": ["/old"],
}
REDIRECTS = {"/old": "/b", "/moved": "/new#section", "/loop": "/loop2", "/loop2": "/loop"}


def app(hits: Counter[str]) -> web.Application:
    def record(request: web.Request) -> None:
        hits[request.path] += 1
        if request.path in REDIRECTS:
            raise web.HTTPMovedPermanently(REDIRECTS[request.path])

    return linking_app(lambda path: LINKS.get(path, []), record)


class Linked(Spider):
    name = "linked"

    def __init__(self, url: str, seeds: tuple[str, ...] = ("/",)) -> None:
        super().__init__()
        self.base = url
        self.seeds = seeds

    async def start(self) -> AsyncIterator[Request]:
        for seed in self.seeds:
            yield Request(self.base + seed)

    def parse(self, response: Response) -> Any:
        yield {"url": response.url, "asked": response.request.url}
        yield from response.follow_all(css="a")


async def crawl(seeds: tuple[str, ...] = ("/",)) -> tuple[Crawler, Counter[str], list[Any]]:
    hits: Counter[str] = Counter()
    items: list[Any] = []
    async with serve(app(hits)) as url:
        crawler = Crawler(
            Linked(url, seeds), Settings(obey_robots=False, concurrency=1, progress_interval=0)
        )
        crawler.items.subscribe(items.append)
        await crawler.run()
    return crawler, hits, [{k: v.removeprefix(url) for k, v in i.items()} for i in items]


async def test_response_url_is_the_fetched_url_without_fragment() -> None:
    _, hits, items = await crawl()
    page_a = [item for item in items if item["url"] == "/a"]
    assert page_a == [{"url": "/a", "asked": "/a#top"}]  # fetched once; the link kept its #
    assert hits["/a"] == 1
    assert not any("#" in item["url"] for item in items)


async def test_a_redirect_to_a_page_already_seen_is_dropped_and_counted() -> None:
    crawler, hits, items = await crawl()
    urls = Counter(item["url"] for item in items)
    # /old -> /b and /moved -> /new: each target fetched by one way only, emitted once
    assert urls == Counter({"/": 1, "/a": 1, "/b": 1, "/new": 1})
    assert (hits["/old"], hits["/moved"], hits["/b"], hits["/new"]) == (1, 1, 1, 1)
    # two duplicate links (/a#bottom, /old from /new) and two duplicate redirects
    assert crawler.stats.filtered == 4
    assert crawler.stats.succeeded == 4


async def test_the_final_url_of_a_redirect_is_marked_seen() -> None:
    """Seeded /moved first (concurrency 1, in order): it lands on /new, which is then
    marked seen, so the link to /new from /a is not fetched again."""
    _, hits, items = await crawl(seeds=("/moved", "/a"))
    assert [item["url"] for item in items].count("/new") == 1
    assert hits["/new"] == 1
    moved = next(item for item in items if item["asked"] == "/moved")
    assert moved["url"] == "/new"  # the fragment of the Location is gone too


async def test_a_redirect_loop_is_still_a_loop() -> None:
    crawler, _, items = await crawl(seeds=("/loop",))
    assert items == []
    assert crawler.stats.failed == 1
    assert "redirect loop" in (crawler.stats.last_error or "")
