"""Owned hosts (``politeness=owner``, ``netdisco.frontiers.redis.owned``) against a real
Redis: each engine takes only the hosts it owns, ownership moves with the members and
carries each host's pace, and a lost engine's work and buckets come back at once."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest
from redis import asyncio as aioredis

from netdisco import Request
from netdisco._fence import Fence
from netdisco.crawl.codec import RequestCodec
from netdisco.exceptions import CrawlLost
from netdisco.frontiers.redis import RedisOptions
from netdisco.frontiers.redis.leases import sweep_expired
from netdisco.frontiers.redis.owned import OWNER_TTL_MS, OwnedFrontier
from netdisco.frontiers.redis.owners import bucket_of, owned_by, recover_engine
from netdisco.frontiers.redis.ownership import TRUSTED
from netdisco.testing import RedisServer
from tests.netdisco.redis_support import SiteSpider, make_request

BUCKETS = 16
HOSTS = [f"h{n}.test" for n in range(40)]


class Book:
    """A ``PaceBook`` that remembers what it was told and answers a fixed pace."""

    def __init__(self, paces: dict[str, tuple[float, float]] | None = None) -> None:
        self.seeded: dict[str, float] = {}
        self._paces = paces or {}

    def paces(self, hosts: Any) -> dict[str, tuple[float, float]]:
        return {host: self._paces[host] for host in hosts if host in self._paces}

    def seed(self, host: str, rest: float) -> None:
        self.seeded[host] = rest


@pytest.fixture
def spider() -> SiteSpider:
    return SiteSpider(start_urls=[])


@pytest.fixture
def crawl(redis_server: RedisServer) -> str:
    return f"{redis_server.url}?prefix=o{uuid.uuid4().hex[:10]}&politeness=owner"


def engine(url: str, spider: SiteSpider, name: str) -> OwnedFrontier[Request]:
    codec = RequestCodec(spider)
    return OwnedFrontier(RedisOptions.from_url(url), "owned", codec, owner=name, buckets=BUCKETS)


def requests(spider: SiteSpider, per_host: int = 3) -> list[Request]:
    return [
        make_request(spider, f"http://{host}/p{n}.html") for host in HOSTS for n in range(per_host)
    ]


async def drain(frontier: OwnedFrontier[Request]) -> list[Request]:
    taken = []
    while (request := await frontier.take()) is not None:
        taken.append(request)
    return taken


async def test_two_engines_each_take_only_their_hosts_and_together_every_request_once(
    crawl: str, spider: SiteSpider
) -> None:
    a, b = engine(crawl, spider, "a"), engine(crawl, spider, "b")
    try:
        await a.open()
        await b.open()
        await a.settle()  # a hands b's buckets on once b is a member...
        await b.settle()  # ...and b takes them
        assert a.ownership.held | b.ownership.held == frozenset(range(BUCKETS))
        assert not a.ownership.held & b.ownership.held
        assert await a.add(requests(spider)) == [True] * len(HOSTS) * 3
        got_a, got_b = await drain(a), await drain(b)
        for frontier, got in ((a, got_a), (b, got_b)):
            wins = owned_by(frontier.owner, {"a", "b"}, BUCKETS)
            assert {bucket_of(r.host_key, BUCKETS) for r in got} <= wins
            assert all([await frontier.may_start(r) for r in got])
            for r in got:
                await frontier.done(r)
        urls = sorted(r.url for r in got_a + got_b)
        assert urls == sorted(r.url for r in requests(spider))  # every request, once
        assert got_a
        assert got_b
        assert await a.counts() == (0, 0, len(urls))
    finally:
        await a.close()
        await b.close()


async def test_a_join_moves_buckets_only_after_their_requests_ended_and_with_their_pace(
    crawl: str, spider: SiteSpider
) -> None:
    a = engine(crawl, spider, "a")
    await a.open()
    b = engine(crawl, spider, "b")
    try:
        won = owned_by("b", {"a", "b"}, BUCKETS)
        host = next(h for h in HOSTS if bucket_of(h, BUCKETS) in won)
        a.use_paces(Book({host: (0.01, 30.0)}))  # started 10 ms ago, 30 s delay
        await a.add([make_request(spider, f"http://{host}/p{n}.html") for n in range(2)])
        first = await a.take()
        assert first is not None
        assert first.host_key == host
        book_b = Book()
        b.use_paces(book_b)
        await b.open()  # a member now; a still holds its buckets
        moves = await a.settle()  # they are leaving: nothing of them starts here
        assert bucket_of(host, BUCKETS) in moves.leaving
        assert not await a.may_start(first)
        assert not a.may_start_now(first)
        assert bucket_of(host, BUCKETS) in a.ownership.held  # in flight: not handed on
        assert (await b.settle()).waiting >= {bucket_of(host, BUCKETS)}
        await a.done(first)  # its request ended: the bucket goes, with the host's pace
        assert bucket_of(host, BUCKETS) not in a.ownership.held
        await b.settle()
        assert bucket_of(host, BUCKETS) in b.ownership.held
        assert 29.0 < book_b.seeded[host] <= 30.0  # the rest the host still owes
        second = await b.take()  # the request a buffered went back to the queue
        assert second is not None
        assert second.url.endswith("/p1.html")
        assert await b.may_start(second)
        await b.done(second)
    finally:
        await a.close()
        await b.close()


@dataclass
class Lost:
    """Engine ``a``, opened with one request a host queued, that will be lost (closed
    without handing anything back); engine ``b``, not opened; a client of the Redis."""

    a: OwnedFrontier[Request]
    b: OwnedFrontier[Request]
    redis: aioredis.Redis
    prefix: str


@pytest.fixture
async def lost(crawl: str, spider: SiteSpider, redis_server: RedisServer) -> AsyncIterator[Lost]:
    a, b = engine(crawl, spider, "a"), engine(crawl, spider, "b")
    redis = aioredis.Redis.from_url(redis_server.url)
    try:
        await a.open()
        await a.add(requests(spider, per_host=1))
        yield Lost(a, b, redis, RedisOptions.from_url(crawl).prefix)
    finally:
        await redis.aclose()
        await a.close(hand_back=False)
        await b.close()


async def test_a_stale_token_takes_nothing_and_the_new_holder_rests_each_host_a_delay(
    lost: Lost, spider: SiteSpider
) -> None:
    a, b, redis = lost.a, lost.b, lost.redis
    # a is cut off (no graceful move): it stops beating, its bucket leases end, and
    # b, alone, wins every bucket
    assert a._owner_task is not None
    a._owner_task.cancel()
    await redis.zrem(f"{lost.prefix}:{{owned}}:members", "a")
    for bucket in range(BUCKETS):
        await redis.delete(a.bucket_keys[bucket].lease)
    book = Book()
    b.set_politeness(0.5, 1)
    b.use_paces(book)
    await b.open()
    await b.settle()
    assert b.ownership.held == frozenset(range(BUCKETS))
    assert await a.take() is None  # every token a carries is refused
    got = await drain(b)
    assert sorted(r.url for r in got) == sorted(r.url for r in requests(spider, 1))
    # nobody said how they stood: the delay, and the share of its lease a's checks did
    # not trust (a request of a's checked just in time may still be on its way)
    untrusted = (1 - TRUSTED) * OWNER_TTL_MS / 1000
    assert book.seeded == pytest.approx(dict.fromkeys(HOSTS, 0.5 + untrusted))


async def test_recovery_returns_a_lost_engines_requests_and_frees_its_buckets_at_once(
    lost: Lost,
) -> None:
    a, b = lost.a, lost.b
    held = await drain(a)
    assert len(held) == len(HOSTS)
    await b.open()
    returned = await recover_engine(lost.redis, lost.prefix, "a")  # as ZooKeeper's does
    assert returned["owned"] == len(HOSTS)
    await b.settle()  # a is no member, and its buckets are free: b wins them all now
    assert b.ownership.held == frozenset(range(BUCKETS))
    assert len(await drain(b)) == len(HOSTS)


async def test_a_lease_of_ours_swept_back_while_we_hold_its_request_is_not_handed_out_twice(
    lost: Lost,
) -> None:
    a, redis = lost.a, lost.redis
    first = await a.take()
    assert first is not None
    await a._hand_back_buffer()  # the rest of the batch back: one request held, no more
    keys = a.bucket_keys[bucket_of(first.host_key, BUCKETS)]
    rid = a._ids[id(first)]
    await redis.zadd(keys.leases, {rid: 0})  # a heartbeat too late: the lease expired
    assert await sweep_expired(redis, [keys]) == 1  # and went back to the queue
    taken = await drain(a)
    assert await redis.zscore(keys.queue, rid) is None  # taken again by us, its owner,
    assert await redis.hget(keys.owner, rid) == b"a"
    assert first.url not in [r.url for r in taken]  # but not handed out a second time


async def test_an_engine_fenced_from_zookeeper_is_no_member_and_its_hosts_move(
    lost: Lost,
) -> None:
    """ZooKeeper says ``a`` is gone (its fence closed, its recovery ran): ``a`` does not
    beat its way back into the members while fenced, so ``b`` keeps every bucket and
    crawls its hosts; once the fence opens, ``a`` is a member again."""
    a, b = lost.a, lost.b
    assert a._owner_task is not None
    a._owner_task.cancel()  # its beat, driven by hand below
    fence = a.fence = Fence()
    fence.close("test: ZooKeeper connection suspended")
    await recover_engine(lost.redis, lost.prefix, "a")  # as the others' recovery does
    await b.open()
    await a.settle()  # fenced: no beat, no renewal
    await b.settle()
    members = await lost.redis.zrange(f"{lost.prefix}:{{owned}}:members", 0, -1)
    assert members == [b"b"]
    assert b.ownership.held == frozenset(range(BUCKETS))
    assert len(await drain(b)) == len(HOSTS)
    fence.open()
    await a.settle()
    members = await lost.redis.zrange(f"{lost.prefix}:{{owned}}:members", 0, -1)
    assert sorted(members) == [b"a", b"b"]


async def test_counts_sum_every_bucket_and_refuse_a_bucket_that_lost_the_crawl(
    lost: Lost,
) -> None:
    a = lost.a
    assert await a.counts() == (len(HOSTS), 0, len(HOSTS))  # one script over the buckets
    await lost.redis.delete(a.bucket_keys[3].epoch)  # as a Redis come back empty would
    a._counted = None  # not the count reused from a moment ago
    with pytest.raises(CrawlLost, match="no crawl"):
        await a.counts()
