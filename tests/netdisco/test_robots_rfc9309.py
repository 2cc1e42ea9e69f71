"""robots.txt read as RFC 9309 says, at a real server on loopback: a byte-order mark is
no part of the first group, groups are matched by product token (whole, any case), and
``Sitemap:`` lines are kept."""

from __future__ import annotations

from typing import Any

import pytest
from aiohttp import web

from netdisco import CallablePipeline, Crawler, Settings
from netdisco.crawl.robots import parse_robots, robots_agent
from netdisco.exceptions import ConfigError
from netdisco.testing import serve
from tests.netdisco.sites import FAST, seeds

PAGES = ("/open", "/private/x", "/mine/x", "/prefix/x", "/org/x")
ROBOTS = (
    "\ufeffUser-agent: *\n"  # the BOM first: the group must still be read
    "Disallow: /private/\n"
    "\n"
    "User-agent: net\n"  # a prefix of netdisco: not our group
    "User-agent: org\n"  # in the default User-Agent's URL: not our group either
    "Disallow: /\n"
    "\n"
    "Sitemap: https://sitemaps.test/one.xml\n"
    "sitemap: /relative.xml\n"
)


async def crawl_with(robots: str, **settings: Any) -> tuple[list[str], Crawler]:
    """The pages crawled from ``PAGES`` on a site serving ``robots``, and the crawler."""

    async def robots_txt(request: web.Request) -> web.Response:
        return web.Response(body=robots.encode(), content_type="text/plain")

    async def page(request: web.Request) -> web.Response:
        return web.Response(text="<h1>page</h1>", content_type="text/html")

    app = web.Application()
    app.router.add_get("/robots.txt", robots_txt)
    app.router.add_get("/{tail:.*}", page)
    items: list[Any] = []
    async with serve(app) as base:
        crawler = Crawler(
            seeds(*(base + path for path in PAGES)),
            Settings(**{**FAST, "progress_interval": 0, **settings}),
            pipelines=[CallablePipeline(items.append)],
        )
        await crawler.run()
        assert crawler.downloader.robots is not None
        sitemaps = crawler.downloader.robots.sitemaps(base + "/")
        assert sitemaps == ("https://sitemaps.test/one.xml", "/relative.xml")
    return sorted(i["url"].removeprefix(base) for i in items), crawler


async def test_a_bom_and_groups_of_other_crawlers_do_not_change_our_rules() -> None:
    crawled, crawler = await crawl_with(ROBOTS)
    assert crawled == ["/mine/x", "/open", "/org/x", "/prefix/x"]
    assert crawler.stats.robots_blocked == 1


async def test_our_group_is_found_by_product_token_in_any_case() -> None:
    ours = ROBOTS + "\nUser-agent: NetDisco/2.0\nDisallow: /mine/\n"
    crawled, _ = await crawl_with(ours)
    assert crawled == ["/open", "/org/x", "/prefix/x", "/private/x"]  # ours, not *'s
    named = ROBOTS + "\nUser-agent: shopbot\nDisallow: /prefix/\n"
    crawled, _ = await crawl_with(named, robots_agent="ShopBot")
    assert crawled == ["/mine/x", "/open", "/org/x", "/private/x"]


@pytest.mark.parametrize(
    ("agents", "robots_agent_setting", "token"),
    [
        ((), "", "netdisco"),
        (("MyBot/1.2 (+https://bot.test/)",), "", "mybot"),
        (("Mozilla/5.0 (compatible; MyBot/1.2)",), "MyBot", "mybot"),
    ],
)
def test_the_product_token(agents: tuple[str, ...], robots_agent_setting: str, token: str) -> None:
    settings = Settings(user_agents=agents, robots_agent=robots_agent_setting)
    assert robots_agent(settings) == token


def test_a_robots_agent_must_be_a_product_token() -> None:
    with pytest.raises(ConfigError, match="not a product token"):
        Settings(robots_agent="my bot/1.0")


def test_rules_are_matched_whole_and_the_longest_wins() -> None:
    rules = parse_robots(
        "User-agent: netdiscovery\nUser-agent: net\nDisallow: /\n\n"
        "User-agent: netdisco*\nDisallow: /a\nAllow: /a/b$\nAllow: /a/%7Ec\n",
        "netdisco",
    )
    assert rules.can_fetch("http://x.test/other", "netdisco")  # netdiscovery, net: not us
    assert not rules.can_fetch("http://x.test/a/bc", "netdisco")
    assert rules.can_fetch("http://x.test/a/b", "netdisco")  # longer Allow, $ anchored
    assert rules.can_fetch("http://x.test/a/~c", "netdisco")  # %7E and ~ are one
    only_net = parse_robots("User-agent: net\nDisallow: /\n", "netdisco")
    assert only_net.can_fetch("http://x.test/", "netdisco")  # a prefix is not a match
