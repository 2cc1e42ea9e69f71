"""Adaptive politeness (``crawl/throttle.py``): autothrottle keeps a site whose latency
rises with its load near the target concurrency, a 429 rests the whole host for its
Retry-After, robots.txt's Crawl-delay is obeyed and capped, the ``hosts`` table applies
per host, a failing host backs off longer each time; and the Redis host queues obey the
same.

Every delay is checked where it is decided, never by times a loaded loop stamps: the
host slots' own record of each turn, start and rest (``ReadyHosts.record_paces``), and
for the Redis host queues the scripts' log on the Redis clock. What the server counts
(requests, how many at once, refusals) is checked at the server.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any

import pytest
from aiohttp import web

from netdisco import Crawler, Request, Response, Settings, Spider
from netdisco.crawl.hosts import Pace
from netdisco.crawl.politeness import Politeness
from netdisco.crawl.settings import from_mapping
from netdisco.crawl.throttle import MAX_HOST_RULES, Throttle
from netdisco.exceptions import ConfigError
from netdisco.frontiers.redis.owned import OwnedFrontier
from netdisco.testing import RedisServer, serve
from tests.netdisco.pace_support import assert_paced, of_host

FAST = {"retry_backoff": 0.01, "timeout": 5.0, "connect_timeout": 2.0}


@dataclass
class Host:
    """Any ``/p/<n>`` page after ``base + per_request * requests in flight`` seconds (503
    past ``limit`` in flight); ``throttle`` maps a path to a Retry-After, answered once."""

    base: float = 0.0
    per_request: float = 0.0
    limit: int = 1_000
    robots: str = ""
    statuses: dict[str, int] = field(default_factory=dict)  # path -> status, always
    throttle: dict[str, str] = field(default_factory=dict)
    arrivals: list[tuple[str, int]] = field(default_factory=list)  # (path, load): no times
    refused: list[str] = field(default_factory=list)  # the paths answered 429/503
    in_flight: int = 0

    async def page(self, request: web.Request) -> web.Response:
        self.in_flight += 1
        self.arrivals.append((request.path, self.in_flight))
        try:
            await asyncio.sleep(self.base + self.per_request * self.in_flight)
            return self._answer(request.path)
        finally:
            self.in_flight -= 1

    def _answer(self, path: str) -> web.Response:
        wait = self.throttle.pop(path, None)
        if wait is not None or self.in_flight > self.limit:
            self.refused.append(path)
            status = 503 if wait is None else 429
            return web.Response(status=status, headers={"Retry-After": wait or "0"})
        if path in self.statuses:
            return web.Response(status=self.statuses[path])
        return web.Response(text="<html><body>page</body></html>", content_type="text/html")

    async def robots_txt(self, request: web.Request) -> web.Response:
        self.arrivals.append((request.path, 0))
        return web.Response(text=self.robots)

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/p/{n}", self.page)
        app.router.add_get("/robots.txt", self.robots_txt)
        return app


class Pages(Spider):
    """``/p/0`` .. ``/p/<n-1>`` of each base, all queued at the start."""

    name = "pages"

    def __init__(self, *bases: str, pages: int) -> None:
        super().__init__()
        self.bases, self.pages = bases, pages

    async def start(self) -> AsyncIterator[Request]:
        for n in range(self.pages):
            for base in self.bases:
                yield Request(f"{base}/p/{n}", callback=self.parse)

    def parse(self, response: Response) -> Iterator[Any]:
        yield {"url": response.url}


@contextlib.asynccontextmanager
async def served(*hosts: Host) -> AsyncIterator[list[str]]:
    """Each host on its own loopback address (127.0.0.1, .2, ...): their base URLs."""
    async with contextlib.AsyncExitStack() as stack:
        yield [
            await stack.enter_async_context(serve(h.app(), f"127.0.0.{n}"))
            for n, h in enumerate(hosts, 1)
        ]


async def run(spider: Spider, **settings: Any) -> Crawler:
    crawler, _ = await paced_run(spider, **settings)
    return crawler


async def paced_run(spider: Spider, **settings: Any) -> tuple[Crawler, list[Pace]]:
    """The crawl, and its hosts' pace decisions as its slots made them."""
    crawler = Crawler(spider, Settings().replace(**{**FAST, **settings}))
    assert isinstance(crawler.politeness, Politeness)
    record = crawler.politeness.hosts.record_paces()
    await asyncio.wait_for(crawler.run(), 60)
    return crawler, record


def simulate_loaded_site(throttle: Throttle, requests: int) -> tuple[list[int], int]:
    """The crawl's pacing against a site whose latency is 10 ms + 20 ms a request in
    flight and that answers 503 past 6 in flight, on a simulated clock: each start waits
    the host's delay after the previous one (what ``HostSlot`` enforces), each answer is
    observed by ``throttle`` when it arrives. The load each request met, and the 503s."""
    host, now, in_flight = "h", 0.0, 0
    ends: list[tuple[float, int, float]] = []  # (when it answers, status, latency)
    loads, refused = [], 0
    for _ in range(requests):
        start = now + throttle.delay(host)
        while ends and min(ends)[0] <= start:  # answers before this start are seen first
            _, status, latency = first = min(ends)
            ends.remove(first)
            in_flight -= 1
            throttle.observe(host, latency, status)
            start = now + throttle.delay(host)  # the delay it has now
        now = start
        in_flight += 1
        loads.append(in_flight)
        latency = 0.01 + 0.02 * in_flight
        status = 503 if in_flight > 6 else 200
        refused += status == 503
        ends.append((now + latency, status, latency))
    return loads, refused


def test_autothrottle_holds_a_loaded_site_near_the_target() -> None:
    """The control law, on a simulated clock: how near the target it holds the site's
    load depends on nothing but the latencies it is told (on a real loop, a loaded
    machine lengthens them, and the site is spared more)."""
    adaptive = throttle(
        autothrottle=True, autothrottle_target_concurrency=2, autothrottle_start_delay=0.01
    )
    loads, refused = simulate_loaded_site(adaptive, 200)
    assert refused <= 1  # error rate near zero
    assert 1.5 <= sum(loads) / len(loads) <= 3.0  # near the target of 2
    assert max(loads) <= 6
    _, plain_refused = simulate_loaded_site(throttle(download_delay=0.001), 200)
    assert plain_refused >= 50  # the site is one that load hurts


async def test_autothrottle_paces_a_real_crawl_by_what_it_observes() -> None:
    """The same crawl for real: every start waited the delay autothrottle had decided when
    the one before went out, the delays followed the site's latency (not the 1 s start
    delay), and the site stayed within its limit."""
    site = Host(0.01, 0.02, limit=6)
    async with served(site) as (base,):
        crawler, record = await paced_run(
            Pages(base, pages=40),
            autothrottle=True,
            autothrottle_target_concurrency=2,
            autothrottle_start_delay=1.0,
            concurrency=16,
            per_host_concurrency=16,
            obey_robots=False,
        )
    assert crawler.stats.succeeded == 40
    paces = of_host(record, base)
    assert_paced(paces)
    delays = [p.due - p.at for p in paces if p.kind == "start"]
    assert delays[0] == pytest.approx(1.0)  # before the first answer: the start delay
    assert max(delays[-10:]) < 0.5  # then latency / target: far below it


@pytest.mark.parametrize("form", ["seconds", "http-date"])
async def test_429_rests_the_whole_host_for_its_retry_after_then_recovers(form: str) -> None:
    asked_at = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=4)
    later = format_datetime(asked_at, usegmt=True)
    host = Host(0.02, throttle={"/p/3": "2" if form == "seconds" else later})
    began = time.time()
    async with served(host) as (base,):
        crawler, record = await paced_run(
            Pages(base, pages=12), per_host_concurrency=2, obey_robots=False
        )
    ended = time.time()
    assert crawler.stats.succeeded == 12
    assert len(host.refused) == 1
    assert len(host.arrivals) == 13  # the twelve and the retry
    paces = of_host(record, base)
    (rest,) = [p for p in paces if p.kind == "rest"]
    assert rest.told
    if form == "seconds":
        assert rest.due - rest.at == pytest.approx(2.0, abs=1e-9)
    else:  # the date, as far from the moment the crawl read it (between began and ended)
        assert asked_at.timestamp() - ended <= rest.due - rest.at <= asked_at.timestamp() - began
    after = [p for p in paces[paces.index(rest) :] if p.kind == "turn"]
    # the retry and every request not yet at its turn when the 429 was read (a request
    # already past its turn was in flight, and is before the rest in the record)
    assert len(after) >= 7
    assert all(turn.at >= rest.due for turn in after)  # the whole host waited it out
    assert all(turn.due <= rest.due for turn in after)  # then went on at its pace: no longer


@pytest.mark.parametrize(
    ("crawl_delay", "cap", "wanted"), [("0.3", 10.0, 0.3), ("3600", 0.25, 0.25)]
)
async def test_crawl_delay_is_obeyed_and_capped(crawl_delay: str, cap: float, wanted: float):
    host = Host(robots=f"User-agent: *\nCrawl-delay: {crawl_delay}\n")
    async with served(host) as (base,):
        crawler, record = await paced_run(
            Pages(base, pages=5), per_host_concurrency=4, max_crawl_delay=cap
        )
    assert crawler.stats.succeeded == 5
    assert len(host.arrivals) == 6  # robots.txt and the five pages
    paces = of_host(record, base)
    assert [p.kind for p in paces].count("start") == 6  # robots.txt counts as a start
    assert_paced(paces, wanted)  # obeyed, and the cap holds: not an hour


async def test_crawl_delay_is_ignored_with_max_crawl_delay_0() -> None:
    host = Host(0.01, robots="User-agent: *\nCrawl-delay: 5\n")
    async with served(host) as (base,):
        crawler, record = await paced_run(
            Pages(base, pages=5), per_host_concurrency=1, max_crawl_delay=0
        )
    assert crawler.stats.succeeded == 5
    paces = of_host(record, base)
    assert [p.kind for p in paces] == ["turn"] * 5  # no delay decided: no start counted
    assert crawler.politeness.throttle.delay(base.removeprefix("http://")) == 0


async def test_the_hosts_table_applies_per_host() -> None:
    one_at_a_time, delayed, plain = Host(0.05), Host(0.0), Host(0.05)
    async with served(one_at_a_time, delayed, plain) as bases:
        table = {
            "127.0.0.1": {"per_host_concurrency": 1},  # any port
            bases[1].removeprefix("http://"): {"download_delay": 0.2},  # this port
        }
        crawler, record = await paced_run(
            Pages(*bases, pages=6), per_host_concurrency=4, obey_robots=False, hosts=table
        )
    assert crawler.stats.succeeded == 18
    assert max(load for _, load in one_at_a_time.arrivals) == 1
    assert_paced(of_host(record, bases[1]), 0.2)
    assert max(load for _, load in plain.arrivals) > 1  # the crawl's own settings
    assert not [p for p in of_host(record, bases[2]) if p.kind == "start"]  # no delay


async def test_a_failing_host_backs_off_longer_with_each_failure_in_a_row() -> None:
    host = Host(statuses={f"/p/{n}": 500 for n in range(4)})
    async with served(host) as (base,):
        crawler, record = await paced_run(
            Pages(base, pages=4),
            per_host_concurrency=1,
            concurrency=1,
            obey_robots=False,
            retries=1,
            retry_backoff=0.05,
            host_error_limit=10,
        )
    assert crawler.stats.failed == 4
    assert len(host.arrivals) == 8  # each page and its retry
    rests = [p for p in of_host(record, base) if p.kind == "rest"]
    waits = [p.due - p.at for p in rests]
    assert len(waits) == 4
    assert not any(p.told for p in rests)
    # nominal 0.05 s * 2^(failures of the host so far), jittered by 0.5-1.5
    assert waits[0] <= 0.075
    assert waits[3] >= 0.2
    paces = of_host(record, base)
    for rest in rests:  # the host's next turn waited it out
        turn = next(p for p in paces[paces.index(rest) :] if p.kind == "turn")
        assert turn.at >= rest.due


async def test_a_shared_crawl_obeys_the_hosts_table_and_crawl_delay(
    redis_server: RedisServer,
) -> None:
    """A Redis frontier owns each host in one engine (``politeness=owner``), whose own
    slots pace it: the hosts table's delay and robots.txt's Crawl-delay both hold, as
    the slots decided them."""
    redis_url = f"{redis_server.url}?prefix=t{uuid.uuid4().hex[:10]}"
    by_table, by_robots = Host(0.01), Host(0.01, robots="User-agent: *\nCrawl-delay: 0.3\n")
    async with served(by_table, by_robots) as bases:
        table = {"127.0.0.1": {"download_delay": 0.3}}
        crawler, record = await paced_run(
            Pages(*bases, pages=4), frontier=redis_url, per_host_concurrency=4, hosts=table
        )
        assert isinstance(crawler.frontier, OwnedFrontier)
    assert crawler.stats.succeeded == 8
    for host in (by_table, by_robots):
        assert len(host.arrivals) == 5  # robots.txt and the pages, each once
    for base in bases:
        assert_paced(of_host(record, base), 0.3)


# -- the rules alone (pure logic) -----------------------------------------------------


def throttle(**settings: Any) -> Throttle:
    return Throttle(Settings().replace(**settings))


def test_autothrottle_follows_latency_and_recovers_after_a_429() -> None:
    t = throttle(autothrottle=True, autothrottle_start_delay=1.0, autothrottle_target_concurrency=2)
    assert t.delay("h") == 1.0  # before the host answered
    for _ in range(20):
        t.observe("h", 0.2, 200)
    assert t.delay("h") == pytest.approx(0.1, abs=1e-3)  # latency / target
    t.observe("h", 0.01, 429)
    assert t.delay("h") == pytest.approx(1.0, abs=0.01)  # doubled, at least the start
    t.observe("h", 0.01, 404)
    assert t.delay("h") == pytest.approx(1.0, abs=0.01)  # a quick error does not lower it
    for _ in range(20):
        t.observe("h", 0.2, 200)
    assert t.delay("h") == pytest.approx(0.1, abs=1e-3)  # recovered


def test_autothrottle_stays_within_its_bounds() -> None:
    t = throttle(autothrottle=True, autothrottle_max_delay=3.0, download_delay=0.5)
    for _ in range(10):
        t.observe("h", 100.0, 200)
    assert t.delay("h") == 3.0
    for _ in range(40):
        t.observe("h", 0.0, 200)
    assert t.delay("h") == 0.5  # download_delay is the least
    t.observe("h", float("nan"), 200)
    assert t.delay("h") == 0.5


def test_autothrottle_off_keeps_download_delay() -> None:
    t = throttle(download_delay=0.2)
    t.observe("h", 5.0, 200)
    t.slowed("h")
    assert t.delay("h") == 0.2


@pytest.mark.parametrize(
    ("asked", "wanted"),
    [(0.3, 0.3), (3600.0, 10.0), (float("inf"), 10.0), (float("nan"), 0.0), (-2.0, 0.0)],
)
def test_crawl_delay_from_the_network_is_bounded(asked: float, wanted: float) -> None:
    t = throttle()
    t.crawl_delay("h", asked)
    assert t.delay("h") == wanted


def test_crawl_delay_is_not_obeyed_without_robots() -> None:
    t = throttle(obey_robots=False)
    t.crawl_delay("h", 2.0)
    assert t.delay("h") == 0.0


def test_host_rules_match_by_port_or_by_name() -> None:
    table = {"Example.ORG.": {"download_delay": 1}, "example.org:8080": {"download_delay": 2},
             "bücher.de": {"per_host_concurrency": 2}}  # fmt: skip
    t = throttle(hosts=table)
    assert [t.delay(h) for h in ("example.org", "example.org:81", "example.org:8080")] == [1, 1, 2]
    assert (t.concurrency("xn--bcher-kva.de"), t.concurrency("other.org")) == (2, 8)


@pytest.mark.parametrize(
    "table",
    [
        {"example.org/path": {}},
        {"user@example.org": {}},
        {"example.org:99999": {}},
        {"exa mple.org": {}},
        {"": {}},
        {"a" * 400: {}},
        {"example.org": {"download_delay": -1}},
        {"example.org": {"download_delay": 1e9}},
        {"example.org": {"download_delay": "1"}},
        {"example.org": {"per_host_concurrency": 0}},
        {"example.org": {"per_host_concurrency": True}},
        {"example.org": {"per_host_concurrency": 1.5}},
        {"example.org": {"render": True}},
        {"example.org": 1},
        {"example.org": {}, "EXAMPLE.org": {}},
        {f"h{n}.org": {} for n in range(MAX_HOST_RULES + 1)},
        "[1, 2]",
        "{not json",
    ],
)
def test_bad_hosts_tables_are_refused(table: Any) -> None:
    with pytest.raises(ConfigError, match="hosts"):
        from_mapping({"hosts": table})


def test_hosts_rows_made_in_code_are_checked() -> None:
    with pytest.raises(ConfigError, match="hosts"):
        Settings(hosts={"example.org": {"download_delay": 1}})  # type: ignore[arg-type]


def test_hosts_table_as_json_and_scrapy_names() -> None:
    s = from_mapping(
        {
            "hosts": '{"example.org": {"download_delay": 0.5}}',
            "AUTOTHROTTLE_ENABLED": "true",
            "AUTOTHROTTLE_TARGET_CONCURRENCY": "4",
            "AUTOTHROTTLE_START_DELAY": "1",
            "AUTOTHROTTLE_MAX_DELAY": "9",
        }
    )
    assert (s.hosts[0].host, s.hosts[0].download_delay) == ("example.org", 0.5)
    assert (s.autothrottle, s.autothrottle_target_concurrency) == (True, 4.0)
    assert (s.autothrottle_start_delay, s.autothrottle_max_delay) == (1.0, 9.0)


@pytest.mark.parametrize(
    "bad",
    [
        {"autothrottle_target_concurrency": 0},
        {"autothrottle_target_concurrency": 1e9},
        {"autothrottle_max_delay": -1},
        {"autothrottle_max_delay": float("inf")},
        {"autothrottle_start_delay": 1e9},
        {"max_crawl_delay": -1},
        {"max_crawl_delay": float("nan")},
    ],
)
def test_autothrottle_settings_are_bounded(bad: dict[str, Any]) -> None:
    with pytest.raises(ConfigError, match=next(iter(bad))):
        from_mapping(bad)


@dataclass
class Unavailable:
    """Its first ``refusals`` page requests get 503 with ``Retry-After: 1``; then pages."""

    refusals: int = 5
    arrivals: list[int] = field(default_factory=list)  # the status each request got

    async def page(self, request: web.Request) -> web.Response:
        status = 503 if len(self.arrivals) < self.refusals else 200
        self.arrivals.append(status)
        if status == 503:
            return web.Response(status=503, headers={"Retry-After": "1"})
        return web.Response(text="<html><body>page</body></html>", content_type="text/html")

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/p/{n}", self.page)
        return app


async def test_retry_after_is_taken_at_its_word_and_the_pace_recovers() -> None:
    """Five 503s saying "retry after 1 s", 20 pages behind them, autothrottle on (start
    delay 1 s): no turn inside a Retry-After window, none waiting longer than it, and
    every wait the crawl decided adds up to under 10 s (once: 20 minutes)."""
    site = Unavailable()
    async with serve(site.app()) as base:
        crawler, record = await paced_run(
            Pages(base, pages=21), autothrottle=True, autothrottle_start_delay=1.0, retries=5,
            obey_robots=False, per_host_concurrency=1,
        )  # fmt: skip
    assert crawler.stats.succeeded == 21
    assert site.arrivals.count(503) == 5
    paces = of_host(record, base)
    rests = [p for p in paces if p.kind == "rest"]
    assert len(rests) == 5
    for rest in rests:
        assert rest.told
        assert rest.due - rest.at == pytest.approx(1.0, abs=1e-9)
        turn = next(p for p in paces[paces.index(rest) :] if p.kind == "turn")
        assert turn.at >= rest.due, "a request inside the Retry-After window"
        assert turn.due == rest.due, "waited longer than the server asked"
    # each turn waited for what the last start or rest before it decided: their sum is
    # the crawl's schedule, whatever a loaded loop added to it
    setter, decided = None, 0.0
    for pace in paces:
        if pace.kind != "turn":
            setter = pace
        elif setter is not None:
            decided += setter.due - setter.at
    assert decided < 10.0


def test_a_retry_after_leaves_the_delay_alone_a_silent_503_doubles_it() -> None:
    t = throttle(autothrottle=True, autothrottle_start_delay=1.0)
    for _ in range(20):
        t.observe("h", 0.2, 200)
    settled = t.delay("h")
    t.observe("h", 0.01, 503, told=True)
    assert t.delay("h") == settled  # the host rests as told; its pace stays
    t.observe("h", 0.01, 503)
    t.observe("h", 0.01, 503)
    assert t.delay("h") == pytest.approx(2.0)  # no word: doubled, twice (from the start)
