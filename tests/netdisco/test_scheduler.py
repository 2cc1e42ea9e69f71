"""Admission (step 2): validity, scope, depth, dedup, priorities; pure and on a real site."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any
from urllib.parse import quote

import pytest

from netdisco import Request, Response, Settings, Spider
from netdisco.crawl.context import CrawlContext
from netdisco.crawl.scheduler import Scheduler, Scope, fingerprint
from netdisco.crawl.stats import Stats
from netdisco.crawl.urls import canonical_url, check_url
from netdisco.frontiers import MemoryFrontier
from tests.netdisco.sites import Site, crawl, running_site, seeds


@pytest.fixture
async def site() -> AsyncIterator[Site]:
    async with running_site() as served:
        yield served


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("http://[::1/x", "malformed URL"),
        ("http://example.test:99999/", "malformed URL"),
        ("ftp://example.test/file", "unsupported scheme 'ftp'"),
        ("mailto:someone@example.test", "unsupported scheme 'mailto'"),
        ("javascript:void(0)", "unsupported scheme 'javascript'"),
        ("/relative/path", "malformed URL"),
        ("http://user@/", "malformed URL"),
        ("http://a..b/", "invalid host name 'a..b'"),
        ("http://" + "a" * 64 + ".test/", "invalid host name"),
        ("http://exa mple.test/", "malformed URL"),
        ("http://exa<mple.test/", "malformed URL"),
    ],
)
def test_check_url_says_why(url: str, reason: str) -> None:
    found, _ = check_url(url)
    assert found is not None
    assert found.startswith(reason)


def test_check_url_accepts_http_and_https() -> None:
    assert check_url("https://Example.TEST:8443/a?b#c") == (None, "example.test")
    assert check_url("http://127.0.0.1/") == (None, "127.0.0.1")
    assert check_url("HTTP://[::1]:8080/") == (None, "::1")
    assert check_url("http://bücher.test/") == (None, "xn--bcher-kva.test")
    assert check_url("http://Example.TEST./") == (None, "example.test")


def test_canonicalisation_ignores_query_order_and_fragments() -> None:
    a = canonical_url("http://example.test/p?b=2&a=1#top")
    assert a == canonical_url("http://example.test/p?a=1&b=2")
    assert fingerprint(Request("http://example.test/p?a=1&b=2")) == fingerprint(
        Request("http://example.test/p?b=2&a=1#frag")
    )
    get = fingerprint(Request("http://example.test/p"))
    assert get != fingerprint(Request("http://example.test/p", method="POST"))
    assert fingerprint(Request("http://example.test/p", method="POST", body=b"1")) != fingerprint(
        Request("http://example.test/p", method="POST", body=b"2")
    )
    assert len(get) == 16


def test_scope_domains_with_subdomains_and_patterns() -> None:
    scope = Scope(["Example.test", ".other.test"], allow=[r"/shop/", r"/tree/"], deny=[r"\.pdf$"])
    assert scope.reason("http://example.test/shop/1", "example.test") is None
    assert scope.reason("http://a.b.example.test/tree/1", "a.b.example.test") is None
    assert scope.reason("http://x.other.test/shop/", "x.other.test") is None
    assert "not in allowed_domains" in (
        scope.reason("http://badexample.test/shop/", "badexample.test") or ""
    )
    assert "not in allowed_domains" in (
        scope.reason("http://example.test.evil/shop/", "example.test.evil") or ""
    )
    assert (
        scope.reason("http://example.test/shop/a.pdf", "example.test") == "matches a deny pattern"
    )
    assert scope.reason("http://example.test/about", "example.test") == "matches no allow pattern"
    assert Scope([], [], []).reason("http://anything.test/", "anything.test") is None


async def test_admit_counts_each_reason() -> None:
    stats, frontier = Stats(), MemoryFrontier[Request]()
    settings = Settings(depth_limit=1, deny=(r"/private/",))
    ctx = CrawlContext(Spider(), settings, stats, frontier)
    scheduler = Scheduler(ctx, Scope(["a.test"], settings.allow, settings.deny))
    requests = [
        Request("http://a.test/1"),
        Request("http://a.test/1#again"),
        Request("ftp://a.test/"),
        Request("http://b.test/"),
        Request("http://a.test/private/x"),
        Request("http://a.test/deep", depth=2),
        Request("http://a.test/1", dont_filter=True),
    ]
    reasons = await scheduler.admit(requests)
    assert reasons[0] is None
    assert reasons[1] == "already seen"
    assert "unsupported scheme" in (reasons[2] or "")
    assert "not in allowed_domains" in (reasons[3] or "")
    assert reasons[4] == "matches a deny pattern"
    assert reasons[5] == "depth 2 is over depth_limit 1"
    assert reasons[6] is None
    assert (stats.scheduled, stats.invalid, stats.filtered) == (2, 1, 4)
    assert await frontier.counts() == (2, 0, 1)


async def test_invalid_links_are_counted_and_the_crawl_goes_on(site: Site) -> None:
    bad = [
        "mailto:x@y.test",
        "ftp://h.test/f",
        "http://[::1/",
        "http://h.test:99999/",
        "javascript:go()",
        "http://a..b/",
        "http://exa mple.test/",
        "http://user@/x",
    ]
    links = [f"link={quote(b)}" for b in bad] + ["link=/tree/13", "link=/tree/14"]
    crawler, items = await crawl(seeds(site.url("/page?" + "&".join(links))))
    assert crawler.stats.invalid == len(bad)
    assert sorted(item["title"] for item in items) == ["page", "tree 13", "tree 14"]


async def test_canonical_duplicates_are_fetched_once(site: Site) -> None:
    links = [
        "/page?a=1%26b=2",
        "/page?b=2%26a=1",
        "/page?a=1%26b=2%23frag",
        "/tree/14%23x",
        "/tree/14",
    ]
    start = site.url("/page?" + "&".join(f"link={link}" for link in links))
    crawler, _ = await crawl(seeds(start))
    assert site.count("/page?a=1&b=2") + site.count("/page?b=2&a=1") == 1
    assert site.count("/tree/14") == 1
    assert crawler.stats.filtered >= 3
    assert crawler.stats.seen == 3


async def test_depth_limit(site: Site) -> None:
    crawler, items = await crawl(seeds(site.url("/tree/0")), depth_limit=2)
    assert sorted(item["title"] for item in items) == [f"tree {n}" for n in range(7)]
    assert crawler.stats.filtered == 8  # the depth-3 children


async def test_max_pages(site: Site) -> None:
    crawler, items = await crawl(seeds(site.url("/tree/0")), max_pages=5, concurrency=4)
    assert crawler.stats.succeeded == 5
    assert len(items) == 5
    assert len(site.paths("/tree/")) == 5
    assert crawler.state.value == "finished"


async def test_allow_and_deny_patterns(site: Site) -> None:
    _, items = await crawl(
        seeds(site.url("/tree/0")), allow=(r"/tree/\d$",), deny=(r"/tree/[34]$",)
    )
    assert sorted(item["title"] for item in items) == [
        "tree 0",
        "tree 1",
        "tree 2",
        "tree 5",
        "tree 6",
    ]
    assert site.paths("/tree/3") == []


async def test_allowed_domains_with_subdomains_through_a_proxy(site: Site) -> None:
    links = [
        f"link=http://{host}/tree/14"
        for host in ("shop.example.test", "badexample.test", "other.test")
    ]
    start = "http://example.test/page?" + "&".join(links)
    spider = seeds(start, allowed_domains=["example.test"])
    crawler, items = await crawl(spider, proxies=(site.base,))
    assert sorted(item["url"] for item in items) == [start, "http://shop.example.test/tree/14"]
    assert {hit.host for hit in site.hits if hit.path != "/robots.txt"} == {
        "example.test",
        "shop.example.test",
    }
    assert crawler.stats.filtered == 2


async def test_robots_is_fetched_through_the_proxy(site: Site) -> None:
    start = "http://example.test/page?link=/private/1&link=/tree/14"
    crawler, items = await crawl(seeds(start), proxies=(site.base,))
    assert site.count("/robots.txt", host="example.test") == 1
    assert crawler.stats.robots_blocked == 1
    assert len(items) == 2


async def test_long_robots_txt_is_read_to_the_end(site: Site) -> None:
    site.robots = "# filler\n" * 30_000 + "User-agent: *\nDisallow: /private/\n"
    crawler, _ = await crawl(seeds(site.url("/private/1")))
    assert crawler.stats.robots_blocked == 1
    assert site.paths("/private/") == []


class PrioritySpider(Spider):
    """The seed page yields requests with different priorities; pages record fetch order."""

    name = "priority"

    def parse(self, response: Response) -> Iterator[Any]:
        for n, priority in ((7, 1), (8, 5), (9, -2), (10, 5), (11, 3)):
            yield Request(response.urljoin(f"/tree/{n}"), priority=priority, callback=self.leaf)

    def leaf(self, response: Response) -> Iterator[Any]:
        yield {"url": response.url}


async def test_higher_priority_first(site: Site) -> None:
    await crawl(PrioritySpider(start_urls=[site.url("/page")]), concurrency=1)
    assert site.paths("/tree/") == ["/tree/8", "/tree/10", "/tree/11", "/tree/7", "/tree/9"]


class PlainRequests(Spider):
    """Builds ``Request`` objects by hand instead of ``response.follow``."""

    name = "plain"

    def parse(self, response: Response) -> Iterator[Any]:
        yield {"title": response.css("h1::text").get()}
        for href in response.css("a::attr(href)").getall():
            yield Request(response.urljoin(href), callback=self.parse)


async def test_depth_limit_holds_for_requests_built_by_hand(site: Site) -> None:
    spider = PlainRequests(start_urls=[site.url("/tree/0")])
    crawler, items = await crawl(spider, depth_limit=2)
    assert sorted(item["title"] for item in items) == [f"tree {n}" for n in range(7)]
    assert crawler.stats.filtered == 8
