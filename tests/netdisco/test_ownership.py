"""Members from Redis and the move of buckets that follows them, against a real Redis
(``netdisco.frontiers.redis.ownership``)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import pytest
from redis import asyncio as aioredis
from redis.exceptions import ResponseError

from netdisco.frontiers.redis.owners import BucketLeases, bucket_of, owned_by, owner_check
from netdisco.frontiers.redis.ownership import Ownership, RedisMembers
from netdisco.testing import RedisServer
from tests.netdisco.proxy_support import StallingProxy


@pytest.fixture
async def redis(redis_server: RedisServer) -> AsyncIterator[aioredis.Redis]:
    client = aioredis.Redis.from_url(redis_server.url)
    yield client
    await client.aclose()


def _engine(redis: aioredis.Redis, spider: str, member: str) -> Ownership:
    leases = BucketLeases(redis, "t", spider, f"{member}-inc", ttl_ms=60_000)
    return Ownership(leases, member, buckets=16)


async def test_members_join_beat_and_leave(redis: aioredis.Redis) -> None:
    spider = uuid.uuid4().hex
    a = RedisMembers(redis, "t", spider, "a", ttl_ms=60_000)
    b = RedisMembers(redis, "t", spider, "b", ttl_ms=60_000)
    assert await a.beat() == {"a"}
    assert await b.beat() == {"a", "b"}
    assert await a.leave() == {"b"}
    await redis.zadd(b.key, {"gone": 1})  # a member whose deadline passed: no member
    assert await b.beat() == {"b"}


async def test_a_join_moves_the_newcomers_buckets_with_their_pace(redis: aioredis.Redis) -> None:
    spider = uuid.uuid4().hex
    a, b = _engine(redis, spider, "a"), _engine(redis, spider, "b")
    first = await a.settle({"a"})
    assert set(first.gained) == set(range(16))
    assert a.held == frozenset(range(16))
    assert not first.waiting
    won = owned_by("b", {"a", "b"}, 16)
    early = await b.settle({"a", "b"})  # a still holds them: b waits
    assert early.waiting == won
    assert not early.gained
    host = next(h for h in (f"h{i}.test" for i in range(200)) if bucket_of(h, 16) in won)
    bucket = bucket_of(host, 16)
    assert not b.may_start(host)

    moved = await a.settle({"a", "b"})
    assert moved.leaving == won
    assert not moved.lost
    assert not a.may_start(host)  # nothing of it starts while a's in-flight end
    assert a.token(host) is None  # nor is any of it taken
    assert await b.settle({"a", "b"}) == early  # still a's until handed off
    for given in sorted(won):
        assert await a.hand_off(given, {host: (0.1, 5.0)} if given == bucket else {})
    assert a.held == frozenset(range(16)) - won
    late = await b.settle({"a", "b"})
    assert set(late.gained) == won
    assert late.gained[bucket].released
    assert 4.0 < late.gained[bucket].rests[host] <= 4.95
    assert b.may_start(host)
    assert b.token(host) == late.gained[bucket].token


async def test_a_bucket_taken_over_is_lost_at_the_next_settle(redis: aioredis.Redis) -> None:
    spider = uuid.uuid4().hex
    a = _engine(redis, spider, "a")
    await a.settle({"a"})
    await redis.delete(a.leases.keys(3).lease)  # its TTL ran out (a cut from Redis)
    other = BucketLeases(redis, "t", spider, "c-inc", ttl_ms=60_000)
    assert await other.acquire(3) is not None
    moves = await a.settle({"a"})
    assert 3 in moves.lost
    assert moves.waiting == {3}
    assert 3 not in a.held


async def _expired(redis: aioredis.Redis, key: str) -> None:
    """Until Redis says ``key`` expired (keyspace notifications: the server's own clock)."""
    await redis.config_set("notify-keyspace-events", "Ex")
    pubsub = redis.pubsub()
    try:
        await pubsub.subscribe("__keyevent@0__:expired")
        async with asyncio.timeout(10):
            async for message in pubsub.listen():
                if message["type"] == "message" and message["data"] == key.encode():
                    return
    finally:
        await pubsub.aclose()
        await redis.config_set("notify-keyspace-events", "")


async def test_an_owner_cut_from_redis_past_its_ttl_starts_nothing_of_the_buckets_it_lost(
    redis_server: RedisServer, redis: aioredis.Redis
) -> None:
    """Its own fence closes before Redis can hand the bucket on, and the token it still
    holds gets nothing once another member took the bucket."""
    proxy = StallingProxy(int(redis_server.url.rsplit(":", 1)[1].split("/")[0]))
    await proxy.start()
    client = aioredis.Redis(host="127.0.0.1", port=proxy.port, socket_timeout=5.0)
    spider, host = uuid.uuid4().hex, "cut.test"
    cut = Ownership(BucketLeases(client, "t", spider, "cut-inc", ttl_ms=400), "cut", 16)
    other = _engine(redis, spider, "other")
    bucket = bucket_of(host, 16)
    try:
        await cut.settle({"cut"})
        assert cut.may_start(host)
        stale = cut.leases.tokens[bucket]
        proxy.stall()  # no renewal reaches Redis from here
        await _expired(redis, cut.leases.keys(bucket).lease)
        assert not cut.may_start(host)  # closed before, on its own clock
        moved = await other.settle({"other"})  # the others' view: cut is gone
        assert bucket in moved.gained
        assert not moved.gained[bucket].released  # no pace to trust: every host rests
        take = owner_check(1, 1) + "return 'taken'"
        with pytest.raises(ResponseError, match="STALE"):
            await redis.eval(take, 1, other.leases.keys(bucket).lease, stale)
    finally:
        await proxy.close()
        await client.aclose()
