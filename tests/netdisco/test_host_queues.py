"""Host queues in Redis (``HostQueueFrontier``) against a real Redis: the rules of a take."""

from __future__ import annotations

import asyncio
import itertools
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from redis import asyncio as aioredis

from netdisco import Crawler, Request, Settings
from netdisco.crawl.codec import RequestCodec
from netdisco.crawl.crawler import frontier_for
from netdisco.exceptions import ConfigError, CrawlLost
from netdisco.frontiers.redis import RedisFrontier, RedisOptions
from netdisco.frontiers.redis.host_scripts import HostKeys
from netdisco.frontiers.redis.hosts import HostQueueFrontier
from netdisco.frontiers.redis.owned import OwnedFrontier
from netdisco.testing import RedisServer, eventually, serve
from tests.netdisco.hosts_support import (
    PAGES,
    HostsSpider,
    LoggingHost,
    closest_starts,
    most_in_flight,
    trace_events,
)
from tests.netdisco.redis_support import SiteSpider, make_request
from tests.netdisco.test_politeness import (  # noqa: F401 - hosts: a fixture
    Host,
    TwoHosts,
    gated_crawl,
    hosts,
)

Factory = Callable[..., HostQueueFrontier[Request]]


@pytest.fixture
def redis_url(redis_server: RedisServer) -> str:
    return f"{redis_server.url}?prefix=h{uuid.uuid4().hex[:10]}&prefetch=1&trace=1"


@pytest.fixture
def spider() -> SiteSpider:
    return SiteSpider(start_urls=["http://127.0.0.1:1/index.html"])


@pytest.fixture
async def frontier(redis_url: str, spider: SiteSpider) -> AsyncIterator[Factory]:
    made: list[HostQueueFrontier[Request]] = []

    def build(
        owner: str | None = None, *, delay: float = 0.0, per_host: int = 2, url: str = redis_url
    ) -> HostQueueFrontier[Request]:
        options = RedisOptions.from_url(url)
        made.append(HostQueueFrontier(options, spider.name, RequestCodec(spider), owner=owner))
        made[-1].set_politeness(delay, per_host)
        return made[-1]

    yield build
    for item in made:
        await item.close(hand_back=False)


def on(spider: SiteSpider, host: str, *paths: str, priority: int = 0) -> list[Request]:
    return [make_request(spider, f"http://{host}/{p}", priority=priority) for p in paths]


def path(request: Request | None) -> str:
    assert request is not None
    return request.url.rsplit("/", 1)[1]


async def test_the_redis_setting_picks_host_queues_unless_told_otherwise(spider: SiteSpider):
    shared = frontier_for(Settings(frontier="redis://127.0.0.1:1/0"), spider, None)
    assert isinstance(shared, HostQueueFrontier)
    assert shared.reserves_hosts
    alone = frontier_for(Settings(frontier="redis://127.0.0.1:1/0?politeness=engine"), spider, None)
    assert isinstance(alone, RedisFrontier)
    assert not alone.reserves_hosts
    owned = frontier_for(Settings(frontier="redis://127.0.0.1:1/0?politeness=owner"), spider, None)
    assert isinstance(owned, OwnedFrontier)
    assert not owned.reserves_hosts  # the crawl's own politeness, on the hosts it owns
    with pytest.raises(ConfigError, match="politeness must be cluster, owner or engine"):
        RedisOptions.from_url("redis://127.0.0.1:1/0?politeness=host")
    with pytest.raises(ConfigError, match="a flag is 0 or 1"):
        RedisOptions.from_url("redis://127.0.0.1:1/0?trace=yes")


def test_bad_politeness_is_refused_by_name(spider: SiteSpider):
    f = HostQueueFrontier(RedisOptions.from_url("redis://127.0.0.1:1/0"), "s", RequestCodec(spider))
    with pytest.raises(ConfigError, match="download_delay"):
        f.set_politeness(float("nan"), 1)
    with pytest.raises(ConfigError, match="download_delay"):
        f.set_politeness(-1.0, 1)
    with pytest.raises(ConfigError, match="per_host_concurrency"):
        f.set_politeness(0.0, 0)


async def test_priorities_hold_within_a_host_and_hosts_take_turns(
    frontier: Factory, spider: SiteSpider
):
    a = frontier("a", per_host=10)
    await a.add(on(spider, "a.test", "a1", "a2", "a3"))
    await a.add(on(spider, "a.test", "a-top", priority=5))
    await a.add(on(spider, "b.test", "b1", "b2"))
    taken = [path(await a.take()) for _ in range(6)]
    assert [p for p in taken if p.startswith("a")] == ["a-top", "a1", "a2", "a3"]
    assert [p for p in taken if p.startswith("b")] == ["b1", "b2"]
    assert taken[:2] in (["a-top", "b1"], ["b1", "a-top"])  # neither host waits for the other
    assert await a.take() is None
    assert await a.counts() == (0, 6, 6)


async def test_a_host_never_holds_more_slots_than_allowed(frontier: Factory, spider: SiteSpider):
    a, b = frontier("a", per_host=2), frontier("b", per_host=2)
    await a.add(on(spider, "busy.test", *(f"p{i}" for i in range(5))))
    first, second = await a.take(), await b.take()
    assert first is not None
    assert second is not None
    assert await a.take() is None  # both slots held: by two engines
    assert await a.counts() == (3, 2, 5)
    await b.done(second)
    await b.flush()
    assert path(await a.take()) == "p2"


async def test_with_a_delay_the_next_start_waits_for_the_last_end(
    frontier: Factory, spider: SiteSpider
):
    a, b = frontier("a", delay=0.3, per_host=4), frontier("b", delay=0.3, per_host=4)
    await a.add(on(spider, "slow.test", "p0", "p1"))
    first = await a.take()
    assert first is not None
    assert await b.take() is None  # one slot a host while there is a delay
    await a.done(first)
    await a.flush()
    assert await eventually(b.take, "p1 due")  # after the delay, from the end of p0
    starts, ends = await trace_times(a)
    assert starts[1] - ends[0] >= 300_000


async def test_back_off_rests_the_host_for_every_engine(frontier: Factory, spider: SiteSpider):
    a, b = frontier("a"), frontier("b")
    await a.add(on(spider, "limited.test", "p0", "p1"))
    p0 = await a.take()
    assert path(p0) == "p0"
    await a.add(on(spider, "free.test", "q0"))
    assert p0 is not None
    p0.attempts = 2
    seconds, micros = await a._redis.time()  # the Redis clock, just before the back-off
    await a.back_off(p0, 0.5)  # a 429 with Retry-After: 0.5, say
    assert path(await b.take()) == "q0"  # another host is not held up
    retried = await eventually(b.take, "the backed-off host due again")
    assert path(retried) == "p0"
    assert retried.attempts == 2  # put back as it was when it failed
    starts, _ = await trace_times(a, host="limited.test")
    assert starts[1] - (seconds * 1_000_000 + micros) >= 500_000


async def test_a_request_that_sent_nothing_gives_its_host_turn_back(
    frontier: Factory, spider: SiteSpider
):
    """robots.txt forbade it: the turn its take booked is not spent (the host is due
    now); a request that went out keeps its host waiting the delay."""
    a = frontier("a", delay=0.3, per_host=1)
    await a.add(on(spider, "denied.test", "private", "open"))

    async def due_in() -> int:  # us until the host may start again, by Redis's clock
        k = a.shard_keys[a._shard("denied.test")]
        sec, us = await a._redis.time()
        due = await a._redis.hget(k.next_start, "denied.test")
        assert due is not None
        return int(due) - (sec * 1_000_000 + us)

    denied = await a.take()
    assert path(denied) == "private"
    assert denied is not None
    a.fetched(denied, sent=False)
    await a.done(denied)
    await a.flush()
    assert await due_in() <= 0
    sent = await a.take()  # at once: no turn to wait out
    assert path(sent) == "open"
    assert sent is not None
    a.fetched(sent)
    await a.done(sent)
    await a.flush()
    assert await due_in() > 0


async def trace_times(f: HostQueueFrontier[Request], host: str = "") -> tuple[list[int], list[int]]:
    events = await trace_events(f)
    mine = [e for e in events if not host or e[2] == host]
    return [int(e[1]) for e in mine if e[0] == "start"], [int(e[1]) for e in mine if e[0] == "end"]


async def test_expired_and_returned_leases_free_their_host(
    frontier: Factory, spider: SiteSpider, redis_url: str
):
    url = f"{redis_url}&lease_ttl=1"
    dead, live = frontier("dead", per_host=1, url=url), frontier("live", per_host=1, url=url)
    await dead.add(on(spider, "one.test", "p0", "p1"))
    assert path(await dead.take()) == "p0"
    assert await live.take() is None
    await dead.close(hand_back=False)  # as if killed: its lease runs out

    async def swept() -> bool:
        await live.beat()  # once the lease ran out, the sweep puts p0 back
        return await live.counts() == (2, 0, 2)

    await eventually(swept, "p0 back once its lease ran out", timeout=30)
    assert path(await live.take()) == "p0"  # the take frees the slot
    await live.close()  # a graceful stop hands p0 back and frees the slot again
    other = frontier("other", per_host=1, url=url)
    assert path(await other.take()) == "p0"
    assert await other.counts() == (1, 1, 2)


async def test_robots_txt_is_fetched_by_one_engine_for_all(
    frontier: Factory, monkeypatch: pytest.MonkeyPatch
):
    engines = [frontier(f"e{i}") for i in range(3)]
    fetched: list[str] = []
    askers: set[asyncio.Task[Any] | None] = set()  # who tried to lock the origin
    for engine in engines:

        def counting(key: str, lock: Any = engine._lock) -> Any:
            askers.add(asyncio.current_task())
            return lock(key)

        monkeypatch.setattr(engine, "_lock", counting)

    async def fetch() -> str:
        fetched.append("x")
        # held until all six askers tried the lock: the five others wait for this copy
        await eventually(lambda: len(askers) >= 6, "the others asking meanwhile", timeout=30)
        return "User-agent: *\nDisallow: /private\n"

    texts = await asyncio.gather(
        *(f.robots_txt("http://one.test", fetch, 60) for f in engines for _ in range(2))
    )
    assert fetched == ["x"]
    assert set(texts) == {"User-agent: *\nDisallow: /private\n"}
    assert await engines[0].robots_txt("http://one.test", fetch, 60) == texts[0]
    assert await engines[0].robots_txt("http://two.test", fetch, 60) == texts[0]
    assert fetched == ["x", "x"]  # per origin

    async def unreachable() -> None:  # a 5xx or a timeout: each engine backs off alone
        fetched.append("down")

    assert await engines[1].robots_txt("http://down.test", unreachable, 60) is None
    assert await engines[2].robots_txt("http://down.test", unreachable, 60) is None
    assert fetched[2:] == ["down", "down"]  # not cached, and the lock was let go


def test_every_host_key_shares_the_spiders_cluster_slot():
    from redis.crc import key_slot

    keys = HostKeys("netdisco", "quotes")
    names = [keys.host_queue("a.test:80"), keys.busy("b.test"), keys.ready, keys.next_start]
    names += [keys.hostof, keys.hosted, keys.trace, keys.robots("http://a.test"), keys.queue]
    assert {key_slot(name.encode()) for name in names} == {key_slot(b"{quotes}")}
    assert keys.host_queue("h").startswith(keys.host_prefix)  # as the scripts build it


async def test_a_slow_host_holds_no_worker_across_engines(
    hosts: tuple[Host, Host],  # noqa: F811 - the fixture of test_politeness
    redis_url: str,
) -> None:
    slow, fast = hosts
    settings = Settings(  # a slot is freed when the download is over, not at the ack
        frontier=redis_url,
        concurrency=2,
        per_host_concurrency=1,
        obey_robots=False,
    )
    # two engines on one crawl (the second's seeds are seen); one slow request at a time
    # for the whole crawl, held until every fast page came: they did not wait for it
    crawlers = [Crawler(TwoHosts(slow.base, fast.base), settings) for _ in range(2)]
    await gated_crawl(slow, fast, *crawlers)
    assert sum(c.stats.succeeded for c in crawlers) == 16


async def test_every_host_script_refuses_a_lost_crawl(frontier: Factory, spider: SiteSpider):
    a = frontier("a")
    await a.add(on(spider, "one.test", "p0", "p1"))
    taken = await a.take()
    assert taken is not None
    await a._redis.delete(a.keys.epoch)  # as after a restart without persistence
    with pytest.raises(CrawlLost, match="lost the crawl"):
        await a.take()
    with pytest.raises(CrawlLost):
        await a.add(on(spider, "one.test", "p2"))
    with pytest.raises(CrawlLost):
        await a.back_off(taken, 1.0)


async def test_a_slot_is_free_when_the_response_ends_not_when_the_ack_is_flushed(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    delay = 0.05
    site = LoggingHost(latency=0.01)
    async with serve(site.app(), "127.0.0.1") as base:
        settings = Settings(
            frontier=redis_url,
            concurrency=4,
            download_delay=delay,
            obey_robots=False,
            # no flush until every page's item is in: a start that waited for an ack
            # would wait for ever (the deadline below), not a flush interval
            flush_interval=3600,
            flush_items=PAGES,
            progress_interval=0,
        )
        crawler = Crawler(HostsSpider(start_urls=[f"{base}/p0.html"]), settings)
        flushed_after: list[int] = []  # the pages the site had served at each flush
        flush = crawler.workers.acks.flush

        async def counted() -> None:
            flushed_after.append(len(site.visits))
            await flush()

        monkeypatch.setattr(crawler.workers.acks, "flush", counted)
        stats = await asyncio.wait_for(crawler.run(), 60)
    assert stats.succeeded == PAGES
    assert flushed_after[0] == PAGES  # no ack was flushed before the last page started
    visits = sorted(site.visits, key=lambda v: v.start)
    gaps = [b.start - a.end for a, b in itertools.pairwise(visits)]
    assert min(gaps) >= delay  # one at a time, the delay after each response's end


async def test_the_last_lease_ending_wakes_the_takers(
    frontier: Factory, spider: SiteSpider, redis_server: RedisServer
) -> None:
    """Takers wait for a wake-up while leases remain, and no add comes at a crawl's end:
    without this one each engine sat out its take wait (1 s) before ending."""
    taker = frontier("a")
    await taker.add(on(spider, "a.test", "p1", "p2"))
    first, last = await taker.take(), await taker.take()
    assert first is not None
    assert last is not None
    client = aioredis.Redis.from_url(redis_server.url)
    async with client.pubsub() as pubsub:
        await pubsub.subscribe(taker.keys.added_channel)
        assert (await next_message(pubsub))["type"] == "subscribe"
        for request in (first, last):  # the host has nothing queued: only the last wakes
            await taker.done(request)
            await taker.flush()
        message = await next_message(pubsub)
    await client.aclose()
    assert message["data"] == taker.keys.host_prefix.encode()


async def next_message(pubsub: Any) -> dict[str, Any]:
    async with asyncio.timeout(10):
        while True:
            message = await pubsub.get_message(timeout=1.0)
            if message is not None:
                return dict(message)


async def test_one_take_leases_a_request_for_every_worker_waiting(
    frontier: Factory, spider: SiteSpider
) -> None:
    """``prefetch=1`` and six workers at once: two round trips (the first take's, then one
    for the five that queued behind it), not one each."""
    taker = frontier("a", per_host=8)
    await taker.add(on(spider, "a.test", *(f"p{n}" for n in range(6))))
    before = taker.round_trips
    taken = await asyncio.gather(*(taker.take() for _ in range(6)))
    assert sorted(path(request) for request in taken) == [f"p{n}" for n in range(6)]
    assert taker.round_trips - before == 2


async def test_links_no_replica_confirmed_are_sent_again(
    frontier: Factory, spider: SiteSpider, redis_server: RedisServer
) -> None:
    """A single Redis has no replica, so ``replicas=1`` leaves every add unconfirmed:
    such links are not remembered as seen and this engine sends them again (a failover
    could have undone the add); confirmed links (``replicas=0``) are not sent again."""
    links = on(spider, "127.0.0.1:1", "a.html", "b.html")
    for replicas, sent_again in ((1, True), (0, False)):
        prefix = f"r{uuid.uuid4().hex[:10]}"
        f = frontier(url=f"{redis_server.url}?prefix={prefix}&replicas={replicas}")
        await f.add(links)
        before = f.round_trips
        await f.add(links)
        assert (f.round_trips > before) is sent_again, replicas


async def test_an_unconfirmed_add_is_sent_again_and_queues_nothing_twice(
    frontier: Factory, spider: SiteSpider, redis_server: RedisServer
) -> None:
    """With no replica to confirm it, an add is sent ``ADD_TRIES`` times (each with its
    ``WAIT``) under one token: the first run's answer comes back each time and nothing
    is queued twice, not even a ``dont_filter`` request, which skips the seen set."""
    prefix = f"r{uuid.uuid4().hex[:10]}"
    f = frontier(url=f"{redis_server.url}?prefix={prefix}&replicas=1")
    links = on(spider, "127.0.0.1:1", "a.html", "b.html")
    links[1].dont_filter = True
    before = f._confirmations.missed
    assert await f.add(links) == [True, True]
    assert f._confirmations.missed == before + 1  # counted once, after every try
    queued, _, _ = await f.counts()
    assert queued == 2
    assert await f.add(links) == [False, True]  # a new add: dont_filter queues it again
    assert (await f.counts())[0] == 3


async def test_adds_made_while_one_is_on_its_way_share_a_round_trip(
    frontier: Factory, spider: SiteSpider
) -> None:
    """Ten pages' links added at once go in one round trip, not ten, and each add learns
    which of its own links were new; an add made while that one is on its way waits
    for it and goes in the next."""
    adder = frontier("a")
    await adder.add(on(spider, "a.test", "p0"))
    pages = [on(spider, "a.test", f"p{n}", f"q{n}", "p0") for n in range(1, 11)]
    before = adder.round_trips
    answers = await asyncio.gather(*(adder.add(links) for links in pages))
    assert adder.round_trips - before == 1
    assert answers == [[True, True, False]] * 10
    first = asyncio.create_task(adder.add(on(spider, "a.test", "r0")))
    for _ in range(2):  # the first add queues, then its batch leaves for Redis
        await asyncio.sleep(0)
    assert adder._adds._queue == []
    later = await adder.add(on(spider, "a.test", "r0", "r1"))  # queued behind the first
    assert (await first, later) == ([True], [False, True])
    assert adder.round_trips - before == 3
    queued, _, seen = await adder.counts()
    assert (queued, seen) == (23, 23)


async def test_a_redirect_to_another_host_waits_for_a_slot_of_that_host(
    redis_url: str,
) -> None:
    """Twenty pages of host A redirect to pages of host B, which has its own pages too.
    Each hop is queued for B rather than fetched on A's slot, so at B's server no more
    than ``per_host_concurrency`` requests are ever in flight; every page is fetched
    once and yields its item, under the URL it was found at the end of its hops."""
    a, b = LoggingHost(latency=0.05), LoggingHost(latency=0.05)
    async with serve(a.app(), "127.0.0.1") as base_a, serve(b.app(), "127.0.0.2") as base_b:
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


async def test_a_redirect_loop_between_two_hosts_ends(redis_url: str) -> None:
    """A/p1 -> B/p1 -> A/p1: the hop back is a URL already seen, so it is dropped as
    a filtered duplicate, and each host served its page once; with ``dont_filter`` the
    hops are counted across hosts and ``max_redirects`` ends the loop."""
    a, b = LoggingHost(latency=0.0), LoggingHost(latency=0.0)
    async with serve(a.app(), "127.0.0.1") as base_a, serve(b.app(), "127.0.0.2") as base_b:
        a.redirects = {"/p1.html": f"{base_b}/p1.html"}
        b.redirects = {"/p1.html": f"{base_a}/p1.html"}
        settings = Settings(frontier=redis_url, obey_robots=False, progress_interval=0)
        stats = await Crawler(HostsSpider(start_urls=[f"{base_a}/p1.html"]), settings).run()
        assert ([v.path for v in a.visits], [v.path for v in b.visits]) == (["/p1.html"],) * 2
        assert (stats.succeeded, stats.failed) == (0, 0)
        a.visits.clear()
        b.visits.clear()
        looping = Settings(
            frontier=redis_url.replace("prefix=", "prefix=loop"),
            obey_robots=False,
            progress_interval=0,
            max_redirects=3,
        )
        stats = await Crawler(Unfiltered(start_urls=[f"{base_a}/p1.html"]), looping).run()
    assert (len(a.visits), len(b.visits)) == (2, 2)  # hops 1, 2, 3 made; the 4th refused
    assert (stats.succeeded, stats.failed) == (0, 1)
    assert "more than 3 redirects" in (stats.last_error or "")


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
    async with serve(site.app(), "127.0.0.1") as base:
        settings = Settings(frontier=redis_url, download_delay=delay, progress_interval=0)
        spider = HostsSpider(start_urls=[f"{base}/p{n}.html" for n in range(3)])
        stats = await Crawler(spider, settings).run()
    assert stats.succeeded == PAGES - 1  # the last page is disallowed
    assert len(site.robots_visits) == 1
    assert closest_starts(site.visits + site.robots_visits) >= delay
