"""RedisFrontier and lease recovery against a real Redis (and ZooKeeper for recovery)."""

from __future__ import annotations

import asyncio
import math
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from redis import asyncio as aioredis
from redis.exceptions import TimeoutError as RedisTimeoutError
from structlog.testing import capture_logs

from netdisco import Request, Settings
from netdisco.cluster.settings import ZooKeeperSettings
from netdisco.crawl.codec import RequestCodec, decode, encode
from netdisco.crawl.crawler import frontier_for
from netdisco.crawl.dedup import DedupPipeline
from netdisco.crawl.pipelines import Pipeline
from netdisco.exceptions import ConfigError, DropItem, FrontierUnavailable, RequestNotShareable
from netdisco.frontiers import MemoryFrontier
from netdisco.frontiers.redis import (
    TAKE_LUA,
    RedisFrontier,
    RedisOptions,
    redact,
)
from netdisco.frontiers.redis.leases import Keys, recover_owner
from netdisco.frontiers.redis.recovery import LeaseRecovery
from netdisco.testing import RedisServer, eventually, free_port
from tests.monitor.fake_engines import FakeEngine
from tests.netdisco.proxy_support import StallingProxy
from tests.netdisco.redis_support import SiteSpider, make_request

Factory = Callable[..., RedisFrontier[Request]]


@pytest.fixture
def redis_url(redis_server: RedisServer) -> str:
    """A key prefix per test: tests never see each other's frontiers; one take, one lease."""
    return f"{redis_server.url}?prefix=t{uuid.uuid4().hex[:10]}&prefetch=1"


@pytest.fixture
def spider() -> SiteSpider:
    return SiteSpider(start_urls=["http://127.0.0.1:1/index.html"])


@pytest.fixture
async def frontier(redis_url: str, spider: SiteSpider) -> AsyncIterator[Factory]:
    made: list[RedisFrontier[Request]] = []

    def build(owner: str | None = None, url: str = redis_url) -> RedisFrontier[Request]:
        made.append(
            RedisFrontier(
                RedisOptions.from_url(url), spider.name, RequestCodec(spider), owner=owner
            )
        )
        return made[-1]

    yield build
    for item in made:
        await item.close(hand_back=False)


def requests_for(spider: SiteSpider, count: int, **kwargs: Any) -> list[Request]:
    return [make_request(spider, f"http://127.0.0.1:1/p{i}.html", **kwargs) for i in range(count)]


async def test_add_dedups_across_frontiers_and_counts(frontier: Factory, spider: SiteSpider):
    a, b = frontier("a"), frontier("b")
    batch = requests_for(spider, 5)
    assert await a.add(batch) == [True] * 5
    again = [*requests_for(spider, 2), make_request(spider, "http://127.0.0.1:1/new")]
    assert await b.add(again) == [False, False, True]
    forced = make_request(spider, "http://127.0.0.1:1/p0.html", dont_filter=True)
    assert await b.add([forced]) == [True]
    assert await a.counts() == (7, 0, 6)


async def test_links_known_as_seen_cost_no_round_trip(frontier: Factory, spider: SiteSpider):
    a = frontier()
    await a.add(requests_for(spider, 3))
    trips = a.round_trips
    assert await a.add(requests_for(spider, 3)) == [False, False, False]
    assert a.round_trips == trips


async def test_take_orders_by_priority_then_fifo(frontier: Factory, spider: SiteSpider):
    a = frontier()
    batch = [
        make_request(spider, f"http://127.0.0.1:1/{name}", priority=priority)
        for name, priority in [("low1", -1), ("mid1", 0), ("high", 5), ("mid2", 0), ("low2", -1)]
    ]
    await a.add(batch)
    taken = [await a.take() for _ in range(5)]
    assert [r.url.rsplit("/", 1)[1] for r in taken if r] == ["high", "mid1", "mid2", "low1", "low2"]
    assert await a.take() is None
    assert await a.counts() == (0, 5, 5)


async def test_concurrent_takers_never_share_a_request(frontier: Factory, spider: SiteSpider):
    engines = [frontier(f"e{i}") for i in range(3)]
    await engines[0].add(requests_for(spider, 300))
    taken: Counter[str] = Counter()

    async def worker(f: RedisFrontier[Request]) -> None:
        while (request := await f.take()) is not None:
            taken[request.url] += 1
            await f.done(request)

    await asyncio.gather(*(worker(f) for f in engines for _ in range(8)))
    for f in engines:
        await f.flush()
    assert len(taken) == 300
    assert set(taken.values()) == {1}
    assert await engines[1].counts() == (0, 0, 300)


async def test_request_round_trip_resolves_callbacks_by_name(spider: SiteSpider):
    request = Request(
        "http://127.0.0.1:1/x",
        method="POST",
        headers={"X-A": "1"},
        body=b"\x00\xffbinary",
        meta={"k": [1, "two"], "n": None},
        priority=3,
        callback=spider.parse,
        errback=spider.failed,
        depth=2,
        fingerprint=b"\x01" * 16,
        attempts=1,
        render=True,
    )
    copy = decode(encode(request, spider), spider)
    assert copy.render
    assert (copy.url, copy.method, copy.headers, copy.body) == (
        request.url,
        "POST",
        {"X-A": "1"},
        b"\x00\xffbinary",
    )
    assert (copy.meta, copy.priority, copy.depth, copy.fingerprint, copy.attempts) == (
        request.meta,
        3,
        2,
        b"\x01" * 16,
        1,
    )
    assert copy.callback == spider.parse
    assert copy.errback == spider.failed


def test_unshareable_requests_are_refused(spider: SiteSpider):
    with pytest.raises(RequestNotShareable, match="not a method of spider"):
        encode(Request("http://h/", callback=lambda r: None), spider)
    other = SiteSpider()
    with pytest.raises(RequestNotShareable, match="not a method of spider"):
        encode(Request("http://h/", callback=other.parse), spider)
    with pytest.raises(RequestNotShareable, match="JSON"):
        encode(Request("http://h/", meta={"when": object()}), spider)


async def test_add_skips_unshareable_requests(frontier: Factory, spider: SiteSpider):
    a = frontier()
    bad = make_request(spider, "http://127.0.0.1:1/bad", meta={"x": {1, 2}})
    good = make_request(spider, "http://127.0.0.1:1/good")
    assert await a.add([bad, good]) == [False, True]
    assert await a.counts() == (1, 0, 1)


async def test_done_acks_or_requeues(frontier: Factory, spider: SiteSpider):
    a = frontier()
    await a.add(requests_for(spider, 2))
    first, second = await a.take(), await a.take()
    assert first is not None
    assert second is not None
    await a.done(first)
    await a.done(second, requeue=True)
    assert await a.counts() == (1, 0, 2)
    again = await a.take()
    assert again is not None
    assert again.url == second.url


async def test_recovery_is_safe_when_many_run_it_at_once(
    frontier: Factory, spider: SiteSpider, redis_url: str
):
    victim, survivor = frontier("victim"), frontier("survivor")
    await victim.add(requests_for(spider, 20))
    held = [await victim.take() for _ in range(12)]
    prefix = victim.options.prefix
    client = aioredis.Redis.from_url(victim.options.url)
    try:
        results = await asyncio.gather(*(recover_owner(client, prefix, "victim") for _ in range(6)))
    finally:
        await client.aclose()
    assert sorted(r[spider.name] for r in results) == [0, 0, 0, 0, 0, 12]
    assert await survivor.counts() == (20, 0, 20)
    # the old owner finishing a returned request after all takes it out of the queue
    request = held[0]
    assert request is not None
    await victim.done(request)
    await victim.flush()
    assert await survivor.counts() == (19, 0, 20)


async def test_expired_leases_are_swept_and_live_ones_renewed(
    frontier: Factory, spider: SiteSpider, redis_url: str
):
    url = f"{redis_url}&lease_ttl=1"
    live, dead, sweeper = frontier("live", url), frontier("dead", url), frontier("sweeper", url)
    await live.add(requests_for(spider, 4))
    assert await live.take() is not None
    assert await dead.take() is not None
    (held,) = await live._redis.smembers(live.keys.owned("live"))
    first_deadline = await live._redis.zscore(live.keys.leases, held)
    assert first_deadline is not None
    await dead.close(hand_back=False)  # its heartbeat stops: as if SIGKILLed, unwatched
    await eventually(lambda: _queued_is(sweeper, 3, trigger=sweeper.beat))

    async def renewed_past_its_first_deadline() -> bool:  # by the Redis clock, as the sweep
        seconds, micros = await live._redis.time()
        now = seconds * 1000 + micros // 1000
        deadline = await live._redis.zscore(live.keys.leases, held)
        return now > first_deadline and deadline is not None and deadline > now

    await eventually(renewed_past_its_first_deadline, "the live lease renewed", timeout=30)
    await sweeper.beat()  # only a renewed lease survives
    assert await sweeper.counts() == (3, 1, 4)


async def _queued_is(
    f: RedisFrontier[Request], expected: int, trigger: Callable[[], Awaitable[None]]
) -> bool:
    await trigger()
    return (await f.counts())[0] == expected


async def test_orphaned_lease_from_a_lost_reply_is_requeued(frontier: Factory, spider: SiteSpider):
    a = frontier("a")
    await a.add(requests_for(spider, 1))
    k = a.keys
    client = aioredis.Redis.from_url(a.options.url)
    try:  # Redis leased it to "a", but "a" never saw the reply
        keys = [k.queue, k.leases, k.owner, k.owned("a"), k.payload, k.take_token("t"), k.epoch]
        await client.eval(TAKE_LUA, 7, *keys, "a", 30000, 1, a.epoch)
    finally:
        await client.aclose()
    await a.beat()
    assert await a.counts() == (0, 1, 1)  # once could be a reply still on its way
    await a.beat()
    assert await a.counts() == (1, 0, 1)


async def test_a_retried_take_gets_the_same_request(frontier: Factory, spider: SiteSpider):
    a = frontier("a")
    await a.add(requests_for(spider, 2))
    k = a.keys
    keys = [k.queue, k.leases, k.owner, k.owned("a"), k.payload, k.take_token("same"), k.epoch]
    client = aioredis.Redis.from_url(a.options.url)
    try:
        first = await client.eval(TAKE_LUA, 7, *keys, "a", 30000, 1, a.epoch)
        again = await client.eval(TAKE_LUA, 7, *keys, "a", 30000, 1, a.epoch)
    finally:
        await client.aclose()
    assert first == again
    assert await a.counts() == (1, 1, 2)


async def test_prefetched_requests_are_leased_and_handed_back(
    frontier: Factory, spider: SiteSpider, redis_url: str
):
    a = frontier("a", url=redis_url.replace("prefetch=1", "prefetch=4"))
    await a.add(requests_for(spider, 6))
    first = await a.take()
    assert first is not None
    assert await a.counts() == (2, 4, 6)
    await a.beat()
    await a.beat()  # buffered requests are ours, not orphans
    assert await a.counts() == (2, 4, 6)
    await a.done(first)
    assert await a.counts() == (2, 3, 6)
    await a.close()
    assert a.handed_back == 3
    assert await frontier("b").counts() == (5, 0, 6)


def _stage_bits(capacity: int, error: float, stage: int) -> int:
    """Stage ``stage``'s bits, as the scalable Bloom filter is specified (scripts.py)."""
    cap, rate = capacity << stage, error / 2 / (1 << stage)
    return math.ceil(cap * -math.log(rate) / math.log(2) ** 2)


async def test_bloom_mode_grows_by_stages_and_never_forgets(
    frontier: Factory, spider: SiteSpider, redis_url: str
):
    """The filter starts at its first stage's size and adds stages as the crawl grows; a
    URL added is seen for ever (no false negatives), and new URLs are rarely taken for
    seen ones (false positives under ``bloom_error``)."""
    a = frontier(url=f"{redis_url}&seen=bloom&bloom_capacity=1000&bloom_error=0.01")
    redis = aioredis.Redis.from_url(a.options.url)
    bitmap = a.keys.bloom
    added: list[bool] = []
    for start in range(0, 3500, 500):
        batch = [
            make_request(spider, f"http://127.0.0.1:1/q{i}") for i in range(start, start + 500)
        ]
        added += await a.add(batch)
        if start + 500 == 1000:  # the first stage is full, and nothing more was allocated
            assert await redis.strlen(bitmap) <= math.ceil(_stage_bits(1000, 0.01, 0) / 8)
    missed = added.count(False)
    assert missed <= 35, f"{missed} of 3500 new URLs taken for seen (1 % is 35)"
    stages = [_stage_bits(1000, 0.01, i) for i in range(3)]  # 1000 + 2000 + 4000 URLs
    assert sum(stages[:2]) / 8 < await redis.strlen(bitmap) <= math.ceil(sum(stages) / 8)
    again = [make_request(spider, f"http://127.0.0.1:1/q{i}") for i in range(3500)]
    assert await a.add(again) == [False] * 3500
    assert await a.counts() == (3500 - missed, 0, 3500 - missed)
    await redis.aclose()


async def test_a_crawl_keeps_its_seen_mode(frontier: Factory, spider: SiteSpider, redis_url: str):
    """Joining a crawl with the other seen mode would forget every URL it has seen."""
    await frontier(url=f"{redis_url}&seen=exact").add(requests_for(spider, 3))
    with pytest.raises(ConfigError, match="seen=exact") as info:
        await frontier(url=f"{redis_url}&seen=bloom").open()
    assert "use seen=exact" in str(info.value)


@pytest.mark.parametrize("seen", ["exact", "bloom"])
async def test_claim_marks_seen_without_queueing(
    frontier: Factory, spider: SiteSpider, redis_url: str, seen: str
):
    """Redirect targets: claimed by one engine, seen by every other, queued by none."""
    a, b = (
        frontier("a", url=f"{redis_url}&seen={seen}"),
        frontier("b", url=f"{redis_url}&seen={seen}"),
    )
    await a.add(requests_for(spider, 2))
    targets = [make_request(spider, "http://127.0.0.1:1/p1.html"), *requests_for(spider, 4)[2:]]
    assert await a.claim(targets) == [False, True, True]
    assert await b.claim(targets[1:]) == [False, False]
    assert await b.add(targets) == [False, False, False]
    assert await a.counts() == (2, 0, 4)


async def test_a_cancellation_that_comes_back_as_a_redis_error_still_cancels(frontier: Factory):
    """On Python 3.11 asyncio.timeout (inside redis-py) can turn a task's cancellation
    into a TimeoutError; retried, the cancellation was lost and the crawl's progress task
    never ended (a stress run's witness: its TaskGroup waited for it for ever)."""
    f = frontier()
    started = asyncio.Event()

    async def read() -> None:
        started.set()
        try:
            await asyncio.Event().wait()  # a read that only a cancellation ends
        except asyncio.CancelledError:
            raise RedisTimeoutError("Timeout reading from socket") from None

    task = asyncio.create_task(f._call(read))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 10)
    assert task.cancelled()


async def test_unreachable_redis_is_a_clear_error_at_start(spider: SiteSpider):
    url = f"redis://user:s3cret@127.0.0.1:{free_port()}/0"
    f = RedisFrontier(RedisOptions.from_url(url), spider.name, RequestCodec(spider))
    with pytest.raises(FrontierUnavailable, match="cannot reach Redis") as info:
        await f.take()
    assert "s3cret" not in str(info.value)
    await f.close()


async def test_operations_wait_while_redis_restarts(spider: SiteSpider, tmp_path):
    server = RedisServer(tmp_path, appendonly=True)
    server.start()
    try:
        f = RedisFrontier(RedisOptions.from_url(server.url), spider.name, RequestCodec(spider))
        await f.add(requests_for(spider, 3))
        await asyncio.to_thread(server.stop)
        with capture_logs() as logs:  # down now: these wait instead of failing
            takes = asyncio.create_task(_take(f, 3))
            await eventually(
                lambda: any(e["event"] == "frontier_unavailable_waiting" for e in logs),
                "a take waiting for Redis",
                timeout=30,
            )
            assert not takes.done()
            await asyncio.to_thread(server.start)
            taken = await asyncio.wait_for(takes, 30)
        assert all(taken)
        assert await f.counts() == (0, 3, 3)
        await f.close()
    finally:
        server.stop()


async def _take(f: RedisFrontier[Request], count: int) -> list[Request | None]:
    return [await f.take() for _ in range(count)]


def test_options_from_url_and_frontier_for(spider: SiteSpider):
    options = RedisOptions.from_url("redis://h:1/2?prefix=p&lease_ttl=5&seen=bloom&db=3")
    assert (options.url, options.prefix, options.lease_ttl, options.seen) == (
        "redis://h:1/2?db=3",
        "p",
        5.0,
        "bloom",
    )
    for bad in (
        "lease_ttl=0",
        "seen=fuzzy",
        "bloom_error=0.6",
        "bloom_capacity=10",
        "lease_ttl=soon",
    ):
        with pytest.raises(ConfigError, match="frontier"):
            RedisOptions.from_url(f"redis://h:1/0?{bad}")
    assert redact("redis://u:pw@h:1/0") == "redis://u:***@h:1/0"
    assert isinstance(frontier_for(Settings(), spider, None), MemoryFrontier)
    made = frontier_for(Settings(frontier="redis://h:1/0"), spider, "x")
    assert isinstance(made, RedisFrontier)
    assert made.owner == "x"


def test_options_keep_the_url_as_written():
    """redis-py 8.2 refuses ``unix:/x``, which a split-and-join writes for ``unix:///x``."""
    cases = {
        "unix:///run/crawl.sock?prefix=p&db=2": "unix:///run/crawl.sock?db=2",
        "unix:///run/crawl.sock?prefix=p": "unix:///run/crawl.sock",
        "redis://:p%40ss@h:1/0?socket_timeout=3&seen=bloom": "redis://:p%40ss@h:1/0?socket_timeout=3",
        "redis+cluster://a:1,b:2/0?prefix=q": "redis+cluster://a:1,b:2/0",
    }
    for given, kept in cases.items():
        assert RedisOptions.from_url(given).url == kept
    assert redact("unix://:pw@/run/crawl.sock?db=1") == "unix://:***@/run/crawl.sock?db=1"


async def test_a_unix_socket_frontier(spider: SiteSpider, tmp_path):
    """``frontier = "unix:///path?db=N&prefix=..."``: a Redis on a socket, as ``-j N`` uses."""
    socket = tmp_path / "redis.sock"
    server = await asyncio.create_subprocess_exec(
        "redis-server", "--port", "0", "--unixsocket", str(socket), "--save", "",
        "--dir", str(tmp_path), stdout=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    try:
        await eventually(socket.exists, timeout=10)
        url = f"unix://{socket}?db=3&prefix=u{uuid.uuid4().hex[:8]}&prefetch=1"
        f = RedisFrontier(RedisOptions.from_url(url), spider.name, RequestCodec(spider))
        await f.add(requests_for(spider, 3))
        taken = [await f.take() for _ in range(3)]
        assert sorted(r.url for r in taken if r is not None) == sorted(
            r.url for r in requests_for(spider, 3)
        )
        client = aioredis.Redis.from_url(f"unix://{socket}?db=3")
        assert await client.dbsize() > 0  # the frontier wrote to database 3
        await client.aclose()
        await f.close(hand_back=False)
    finally:
        server.terminate()
        await server.wait()


def _fake_engine(zk_hosts: str, name: str, incarnation: str) -> FakeEngine:
    engine = FakeEngine(zk_hosts, "/netdiscovery", name, 2.0)
    engine.join(incarnation=incarnation)
    return engine


async def test_lost_engine_leases_return_graceful_ones_stay(
    frontier: Factory, spider: SiteSpider, zk_hosts: str
):
    lost, leaving = frontier("inc-lost"), frontier("inc-leaving")
    await lost.add(requests_for(spider, 10))
    for f in (lost, leaving):
        for _ in range(3):
            assert await f.take() is not None
    zk = ZooKeeperSettings(hosts=zk_hosts, session_timeout=2.0)
    clients = [
        await asyncio.to_thread(_fake_engine, zk_hosts, n, f"inc-{n}") for n in ("lost", "leaving")
    ]
    watcher = LeaseRecovery(zk, lost.options.url, prefix=lost.options.prefix, incarnation="me")
    await watcher.start()
    try:
        await eventually(lambda: _watching(watcher, 2))
        await asyncio.to_thread(clients[1].leave)  # as the registry leaves: with a tombstone
        await asyncio.to_thread(clients[0].client.stop)  # session closed: the node vanishes
        await eventually(lambda: _queued_is(lost, 7, trigger=_nothing))
        await eventually(lambda: _watching(watcher, 0))
        await eventually(lambda: watcher.recoveries, "the recovery recorded")  # see below
        assert [(r.engine_id, r.returned) for r in watcher.recoveries] == [
            ("lost", {spider.name: 3})
        ]
        assert await lost.counts() == (7, 3, 10)
    finally:
        await watcher.stop()
        for client in clients:
            await asyncio.to_thread(client.close)


async def test_crash_and_re_register_under_the_same_id_between_two_listings(
    frontier: Factory, spider: SiteSpider, zk_hosts: str
):
    """The name never leaves the listing; the node (czxid) does: the old leases go back."""
    old = frontier("inc-old")
    await old.add(requests_for(spider, 6))
    for _ in range(2):
        assert await old.take() is not None
    zk = ZooKeeperSettings(hosts=zk_hosts, session_timeout=2.0)
    first = await asyncio.to_thread(_fake_engine, zk_hosts, "e1", "inc-old")
    second = await asyncio.to_thread(FakeEngine, zk_hosts, "/netdiscovery", "e1", 2.0)
    watcher = LeaseRecovery(zk, old.options.url, prefix=old.options.prefix, incarnation="me")
    await watcher.start()
    try:
        await eventually(lambda: _watching(watcher, 1))
        # On the loop's own thread: the recovery cannot list between the two.
        first.client.stop()  # the crash: its session ends, the node goes, no tombstone
        second.join(incarnation="inc-new")  # the same id again, at once
        await eventually(lambda: _queued_is(old, 6, trigger=_nothing))
        # recorded once Redis's answer is back on the loop, which can be after the counts
        await eventually(lambda: watcher.recoveries, "the recovery recorded")
        assert [(r.engine_id, r.incarnation) for r in watcher.recoveries] == [("e1", "inc-old")]
        assert watcher.view.members["e1"].payload.incarnation == "inc-new"
    finally:
        await watcher.stop()
        for engine in (first, second):
            await asyncio.to_thread(engine.close)


async def _watching(watcher: LeaseRecovery, count: int) -> bool:
    return len(watcher.view.members) == count


async def _nothing() -> None:
    return None


def test_keys_share_one_cluster_slot():
    keys = Keys("netdisco", "quotes")
    names = [keys.queue, keys.payload, keys.seen, keys.leases, keys.owner, keys.owned("x")]
    assert all("{quotes}" in name for name in names)


class Collect(Pipeline):
    def __init__(self) -> None:
        self.items: list[Any] = []

    async def process(self, item: Any) -> None:
        self.items.append(item)


class Failing(Pipeline):
    def process(self, item: Any) -> None:
        raise OSError("disk full")


async def test_dedup_pipeline_passes_each_key_once_across_engines(redis_url: str):
    sinks = [Collect(), Collect()]
    pipes = [DedupPipeline(sink, redis_url, key=lambda item: item["url"]) for sink in sinks]
    failing = DedupPipeline(Failing(), redis_url, key=lambda item: item["url"])
    for pipe in [*pipes, failing]:
        await pipe.open()
    try:
        await pipes[0].process({"url": "a"})
        with pytest.raises(DropItem, match="duplicate"):
            await pipes[1].process({"url": "a"})
        await pipes[1].process({"url": "b"})
        with pytest.raises(OSError, match="disk full"):
            await failing.process({"url": "c"})
        await pipes[0].process({"url": "c"})  # unmarked after the failed write
    finally:
        for pipe in [*pipes, failing]:
            await pipe.close()
    assert sinks[0].items == [{"url": "a"}, {"url": "c"}]
    assert sinks[1].items == [{"url": "b"}]


async def test_after_an_outage_the_listener_subscribes_anew(
    redis_server: RedisServer, redis_url: str, spider: SiteSpider
):
    """Notices published after a cut healed reach the engine that was cut, although its
    old subscription stays stalled (the 6 Dec CI run: an engine that missed every
    wake-up lost every turn to the others and fetched nothing for a minute)."""
    proxy = StallingProxy(int(redis_server.url.rsplit(":", 1)[1].split("/")[0]))
    await proxy.start()
    options = RedisOptions.from_url(redis_url)
    client = aioredis.Redis(host="127.0.0.1", port=proxy.port, protocol=2,
                            socket_connect_timeout=1.0, socket_timeout=1.0)  # fmt: skip
    cut = RedisFrontier(options, spider.name, RequestCodec(spider), redis=client)
    other = RedisFrontier(options, spider.name, RequestCodec(spider))
    woken: list[Any] = []
    cut._woken = woken.append  # type: ignore[method-assign,assignment]
    try:
        await cut.open()
        await other.open()
        proxy.stall()
        with capture_logs() as logs:
            take = asyncio.create_task(cut.take())
            await eventually(
                lambda: any(e["event"] == "frontier_unavailable_waiting" for e in logs),
                "the cut frontier waiting", timeout=30,
            )  # fmt: skip
            proxy.mend()
            await eventually(
                lambda: any(e["event"] == "frontier_available_again" for e in logs),
                "the cut frontier back", timeout=30,
            )  # fmt: skip
        await eventually(cut._listening.is_set, "subscribed again", timeout=15)
        await other.add(requests_for(spider, 1))
        await eventually(lambda: woken, "a wake-up through a new subscription", timeout=15)
        take.cancel()
        await asyncio.gather(take, return_exceptions=True)
    finally:
        await cut.close(hand_back=False)
        await other.close(hand_back=False)
        await proxy.close()
