"""The downloader against real servers on loopback: failures, limits, retries, politeness."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterator
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any

import pytest
from structlog.testing import capture_logs

from netdisco import CallablePipeline, Crawler, Request, Response, Settings, Spider
from netdisco.crawl.politeness import Politeness, retry_after
from netdisco.testing import eventually, free_port
from tests.netdisco.pace_support import assert_paced, of_host, timeout_only_for
from tests.netdisco.sites import FAST, Site, crawl, running_raw, running_site, seeds


@pytest.fixture
async def site() -> AsyncIterator[Site]:
    async with running_site() as served:
        yield served


async def test_connection_refused_is_retried_then_failed() -> None:
    url = f"http://127.0.0.1:{free_port()}/"
    crawler, items = await crawl(seeds(url), retries=2)
    stats = crawler.stats
    assert (stats.failed, stats.retried, stats.succeeded, items) == (1, 2, 0, [])
    assert url in (stats.last_error or "")


async def test_unresolvable_host_fails_without_retries() -> None:
    crawler, _ = await crawl(seeds("http://no-such-host.invalid/"), retries=3)
    assert (crawler.stats.failed, crawler.stats.retried) == (1, 0)
    assert crawler.state.value == "finished"


async def test_server_that_never_answers_times_out(site: Site) -> None:
    # only /never has the crawl's 0.3 s to beat: the pages that answer get a generous
    # timeout, so a busy machine cannot time one of them out and retry it
    settings = Settings(**{**FAST, "timeout": 0.3, "retries": 1})
    items: list[Any] = []
    never = site.url("/never")
    async with timeout_only_for(settings, lambda request: request.url == never) as handler:
        crawler = Crawler(
            seeds(never, site.url("/tree/0")),
            settings,
            pipelines=[CallablePipeline(items.append)],
            download_handler=handler,
        )
        with capture_logs() as logs:
            await asyncio.wait_for(crawler.run(), 40)
    stats = crawler.stats
    assert (stats.failed, stats.retried) == (1, 1)
    failures = [(e["url"], e["error"]) for e in logs if e["event"] == "request_failed"]
    assert failures == [(site.url("/never"), "timed out")]
    assert site.count("/never") == 2
    assert len(items) == site.tree_size  # the rest of the crawl went on


async def test_truncated_body_fails_after_retries() -> None:
    reply = (
        b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: 1000\r\n\r\n" + b"x" * 100
    )
    async with running_raw({"/truncated": reply}) as raw:
        crawler, items = await crawl(seeds(raw.base + "/truncated"), retries=1, obey_robots=False)
    assert (crawler.stats.failed, crawler.stats.retried, items) == (1, 1, [])
    assert raw.requests.count("/truncated") == 2


async def test_garbage_response_is_a_failure_not_a_crash() -> None:
    replies = {"/garbage": b"THIS IS NOT HTTP\r\n\r\n", "/ok": _raw_page(b"<h1>fine</h1>")}
    async with running_raw(replies) as raw:
        spider = seeds(raw.base + "/garbage", raw.base + "/ok")
        crawler, items = await crawl(spider, retries=1, obey_robots=False, concurrency=1)
    assert crawler.stats.failed == 1
    assert [item["title"] for item in items] == ["fine"]
    assert crawler.state.value == "finished"


def _raw_page(body: bytes) -> bytes:
    head = f"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: {len(body)}\r\n\r\n"
    return head.encode() + body


@pytest.mark.parametrize("route", ["/big", "/big-chunked", "/big-gzip"])
async def test_body_over_max_response_size(site: Site, route: str) -> None:
    small, large = site.url(f"{route}?size=1000"), site.url(f"{route}?size=300000")
    crawler, items = await crawl(seeds(large, small), max_response_size=100_000)
    assert (crawler.stats.too_large, crawler.stats.succeeded) == (1, 1)
    assert [item["url"] for item in items] == [small]
    assert crawler.stats.bytes < 200_000  # reading stopped near the limit


async def test_redirect_chain_is_followed_up_to_the_cap(site: Site) -> None:
    ok, over = site.url("/redirect/chain/3"), site.url("/redirect/chain/9")
    crawler, items = await crawl(seeds(ok, over), max_redirects=3)
    assert [(item["title"], item["url"]) for item in items] == [
        ("chain end", site.url("/redirect/chain/0"))
    ]
    assert crawler.stats.failed == 1
    assert "more than 3 redirects" in (crawler.stats.last_error or "")


async def test_redirect_loop_is_caught(site: Site) -> None:
    crawler, items = await crawl(seeds(site.url("/redirect/loop/a")), max_redirects=50)
    assert (crawler.stats.failed, items) == (1, [])
    assert "redirect loop" in (crawler.stats.last_error or "")
    assert site.count("/redirect/loop/a") == 1
    assert site.count("/redirect/loop/b") == 1


async def test_redirect_out_of_scope_is_rejected(site: Site) -> None:
    away = site.url("/redirect/to?url=http://elsewhere.test/")
    crawler, items = await crawl(seeds(away, allowed_domains=["127.0.0.1"]))
    assert (crawler.stats.filtered, crawler.stats.failed, items) == (1, 0, [])
    assert "elsewhere.test" in (crawler.stats.last_error or "")


async def test_redirect_hop_is_checked_against_robots(site: Site) -> None:
    crawler, items = await crawl(seeds(site.url("/redirect/to?url=/private/x")))
    assert (crawler.stats.robots_blocked, items) == (1, [])
    assert site.count("/private/x") == 0


async def test_5xx_then_success_is_retried(site: Site) -> None:
    crawler, items = await crawl(seeds(site.url("/flaky/a?fail=2")), retries=2)
    assert (crawler.stats.retried, crawler.stats.succeeded, crawler.stats.failed) == (2, 1, 0)
    assert [item["title"] for item in items] == ["flaky a ok"]


async def test_5xx_beyond_retries_fails(site: Site) -> None:
    crawler, items = await crawl(seeds(site.url("/flaky/b?fail=5&code=502")), retries=2)
    assert (crawler.stats.retried, crawler.stats.failed, items) == (2, 1, [])
    assert site.count("/flaky/b?fail=5&code=502") == 3


async def test_404_is_not_retried(site: Site) -> None:
    crawler, _ = await crawl(seeds(site.url("/status/404")), retries=3)
    assert (crawler.stats.retried, crawler.stats.failed) == (0, 1)
    assert site.count("/status/404") == 1


async def test_429_retry_after_is_honoured(site: Site) -> None:
    crawler, _ = await crawl(seeds(site.url("/retry-after/a?seconds=1")), retries=1)
    assert (crawler.stats.retried, crawler.stats.succeeded) == (1, 1)
    first, second = site.times("/retry-after/a")
    assert second - first >= 1.0


async def test_retry_after_is_capped(site: Site) -> None:
    url = site.url("/retry-after/b?seconds=3600")
    crawler, _ = await crawl(seeds(url), retries=1, retry_max_delay=0.3)
    assert crawler.stats.succeeded == 1
    first, second = site.times("/retry-after/b")
    assert second - first >= 0.3


def test_retry_after_parses_seconds_and_dates() -> None:
    later = format_datetime(datetime.now(UTC) + timedelta(seconds=30), usegmt=True)
    assert retry_after({"Retry-After": "7"}, 60) == 7
    assert retry_after({"Retry-After": "7"}, 5) == 5
    assert retry_after({"Retry-After": "-3"}, 60) == 0
    assert 25 < (retry_after({"Retry-After": later}, 60) or 0) <= 30
    assert retry_after({"Retry-After": "soon"}, 60) is None
    assert retry_after({}, 60) is None


async def test_robots_disallow_is_counted_and_fetched_once(site: Site) -> None:
    links = [f"link=/private/{n}" for n in range(5)] + [f"link=/tree/{n}" for n in range(3)]
    crawler, items = await crawl(seeds(site.url("/page?" + "&".join(links))), concurrency=8)
    assert crawler.stats.robots_blocked == 5
    assert site.count("/robots.txt") == 1
    assert not site.paths("/private/")
    assert len(items) == 1 + site.tree_size


async def test_robots_can_be_ignored(site: Site) -> None:
    crawler, _ = await crawl(seeds(site.url("/private/a")), obey_robots=False)
    assert (crawler.stats.robots_blocked, site.count("/private/a")) == (0, 1)
    assert site.count("/robots.txt") == 0


async def test_robots_4xx_allows_everything(site: Site) -> None:
    site.robots_status = 404
    crawler, _ = await crawl(seeds(site.url("/private/a")))
    assert (crawler.stats.robots_blocked, site.count("/private/a")) == (0, 1)


async def test_malformed_redirect_target_is_invalid(site: Site) -> None:
    spider = seeds(site.url("/redirect/to?url=http://[oops/"), site.url("/tree/0"))
    crawler, items = await crawl(spider, concurrency=1)
    assert crawler.stats.invalid == 1
    assert len(items) == site.tree_size  # the crawl went on
    assert crawler.state.value == "finished"


async def test_download_delay_gates_request_starts(site: Site) -> None:
    delay = 0.25
    links = "&".join(f"link=/slow/{n}?s=0.01" for n in range(5))
    settings = Settings(**FAST, download_delay=delay, concurrency=4, per_host_concurrency=4)
    crawler = Crawler(seeds(site.url("/page?" + links)), settings)
    assert isinstance(crawler.politeness, Politeness)
    record = crawler.politeness.hosts.record_paces()
    await asyncio.wait_for(crawler.run(), 40)
    assert len(site.times("/page") + site.times("/slow/")) == 6  # each page once
    # the delay checked where the host's slot decided it, not at a server on our loop:
    # robots.txt and the six pages went out one delay apart, each turn no sooner
    paces = of_host(record, site.base)
    assert [p.kind for p in paces].count("start") == 7
    assert [p.kind for p in paces].count("turn") == 6
    assert_paced(paces, delay)


async def held_until(
    site: Site, full: Callable[[], bool], what: str, spider: Spider, **settings: Any
) -> tuple[Crawler, list[Any]]:
    """Crawl ``spider`` while its ``/slow/`` pages hold (they answer when the site closes,
    or after an hour): the site lets them go once ``full()`` says the crawl has all it
    may have in flight, so the overlap checked is there by construction, not by latency
    (and a crawl that never gets there fails here, by the deadline)."""
    crawling = asyncio.create_task(crawl(spider, **settings))
    try:
        await eventually(full, what, timeout=30)
    finally:
        site.closing.set()  # the held pages answer now, and any later one at once
        done = await crawling
    return done


async def test_per_host_concurrency_is_never_exceeded(site: Site) -> None:
    port = site.base.rsplit(":", 1)[1]
    urls = [
        f"http://{host}:{port}/slow/{n}?s=3600"
        for n in range(6)
        for host in ("127.0.0.1", "localhost")
    ]

    def both_hosts_full() -> bool:
        return site.active["127.0.0.1"] >= 2 and site.active["localhost"] >= 2

    _, items = await held_until(
        site, both_hosts_full, "two in flight on each host", seeds(*urls),
        concurrency=8, per_host_concurrency=2, obey_robots=False,
    )  # fmt: skip
    assert len(items) == 12
    assert site.peak["127.0.0.1"] <= 2
    assert site.peak["localhost"] <= 2
    assert site.peak_total == 4  # the cap is per host, not global


async def test_global_concurrency_is_never_exceeded(site: Site) -> None:
    urls = [site.url(f"/slow/{n}?s=3600") for n in range(10)]

    def crawl_full() -> bool:
        return site.active["127.0.0.1"] >= 3

    _, items = await held_until(
        site, crawl_full, "three in flight", seeds(*urls), concurrency=3, per_host_concurrency=8
    )
    assert len(items) == 10
    assert site.peak["127.0.0.1"] == 3


class Proxied(Spider):
    """Seeds one request through a per-request proxy, with its own User-Agent header."""

    name = "proxied"
    proxy = ""

    async def start(self) -> AsyncIterator[Request]:
        headers = {"User-Agent": "per-request/2"}
        yield Request("http://virtual.test/tree/14", proxy=self.proxy, headers=headers)

    def parse(self, response: Response) -> Iterator[dict[str, str]]:
        yield {"url": response.url}


async def test_user_agent_and_per_request_proxy(site: Site) -> None:
    _, items = await crawl(Proxied(proxy=site.base), user_agents=("settings-agent/1",))
    assert items == [{"url": "http://virtual.test/tree/14"}]
    agents = {(hit.host, hit.path, hit.agent) for hit in site.hits}
    assert agents == {
        ("virtual.test", "/robots.txt", "settings-agent/1"),
        ("virtual.test", "/tree/14", "per-request/2"),
    }


async def test_robots_groups_match_our_user_agent(site: Site) -> None:
    site.robots = "User-agent: otherbot\nDisallow: /\n\nUser-agent: netdisco\nDisallow: /tree/1\n"
    crawler, items = await crawl(seeds(site.url("/tree/0")))
    assert crawler.stats.robots_blocked == 5  # /tree/1 and every /tree/1x page
    assert sorted(item["title"] for item in items) == [f"tree {n}" for n in (0, 2, 5, 6)]


async def test_one_host_spelled_two_ways_is_one_host(site: Site) -> None:
    """A seed written ``http://127.1:P`` and its links (resolved to ``127.0.0.1:P``) are
    one host: one robots.txt, one politeness slot."""
    port = site.base.rsplit(":", 1)[1]
    start = f"HTTP://127.1:{port}/page?link=/tree/1&link=/private/2"
    crawler, items = await crawl(seeds(start), concurrency=8)
    assert site.count("/robots.txt") == 1
    assert crawler.stats.robots_blocked == 1
    assert len(items) >= 2
