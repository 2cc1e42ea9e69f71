"""Bucket ownership against a real Redis: rendezvous hashing, leases, fencing tokens,
and the pace a graceful move hands on (``netdisco.frontiers.redis.owners``)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from redis import asyncio as aioredis
from redis.exceptions import ResponseError

from netdisco.frontiers.redis.leases import spiders_key
from netdisco.frontiers.redis.owners import (
    BucketLeases,
    bucket_of,
    free_incarnation,
    owned_by,
    owner_check,
    recover_engine,
    winner,
)
from netdisco.testing import RedisServer

MEMBERS = [f"engine-{i}" for i in range(3)]


@pytest.fixture
async def redis(redis_server: RedisServer) -> AsyncIterator[aioredis.Redis]:
    client = aioredis.Redis.from_url(redis_server.url)
    yield client
    await client.aclose()


def _leases(redis: aioredis.Redis, spider: str, incarnation: str) -> BucketLeases:
    return BucketLeases(redis, "t", spider, incarnation, ttl_ms=60_000)


def test_each_bucket_has_one_winner_and_a_join_moves_only_what_the_newcomer_wins() -> None:
    before = {m: owned_by(m, MEMBERS) for m in MEMBERS}
    assert set().union(*before.values()) == set(range(256))
    assert sum(len(b) for b in before.values()) == 256  # no bucket twice
    assert all(50 < len(b) < 120 for b in before.values())  # about a third each
    joined = [*MEMBERS, "engine-3"]
    after = {m: owned_by(m, joined) for m in joined}
    for member in MEMBERS:  # the old members keep what the newcomer did not win
        assert before[member] - after["engine-3"] == after[member]
    assert owned_by("stranger", MEMBERS) == frozenset()
    assert winner(7, []) is None
    assert bucket_of("example.org") == bucket_of("example.org") != bucket_of("example.com")


async def test_one_holder_at_a_time_and_a_token_never_reused(redis: aioredis.Redis) -> None:
    spider = uuid.uuid4().hex
    a, b = _leases(redis, spider, "a"), _leases(redis, spider, "b")
    first = await a.acquire(5)
    assert first is not None
    assert first.token == 1
    assert not first.released
    assert await b.acquire(5) is None  # a holds it
    again = await a.acquire(5)  # ours already: the same token
    assert again is not None
    assert again.token == 1
    assert await a.release(5, {}) is True
    second = await b.acquire(5)
    assert second is not None
    assert second.token == 2
    assert second.released
    assert await a.release(5, {}) is False  # not a's any more: nothing written


async def test_a_graceful_move_hands_each_hosts_rest_to_the_gainer(
    redis: aioredis.Redis,
) -> None:
    spider = uuid.uuid4().hex
    a, b = _leases(redis, spider, "a"), _leases(redis, spider, "b")
    assert await a.acquire(9) is not None
    # h1 started 0.1 s ago with a delay of 5 s; h2 long ago: only h1 must rest
    assert await a.release(9, {"h1": (0.1, 5.0), "h2": (30.0, 5.0)})
    got = await b.acquire(9)
    assert got is not None
    assert got.released
    assert set(got.rests) == {"h1"}
    assert 4.0 < got.rests["h1"] <= 4.9 + 0.05


async def test_an_expired_lease_is_taken_with_no_pace_and_its_old_holder_is_fenced(
    redis: aioredis.Redis,
) -> None:
    spider = uuid.uuid4().hex
    a, b = _leases(redis, spider, "a"), _leases(redis, spider, "b")
    held = await a.acquire(3)
    assert held is not None
    await redis.delete(a.keys(3).lease)  # as its TTL would end it (a cut from Redis)
    took = await b.acquire(3)
    assert took is not None
    assert took.token == held.token + 1
    assert not took.released  # nobody wrote the hosts' last starts: all rest a delay
    assert await a.renew() == {3}
    assert 3 not in a.tokens
    assert await b.renew() == set()
    script = owner_check(1, 1) + "return 'ran'"
    lease = b.keys(3).lease
    with pytest.raises(ResponseError, match="STALE"):
        await redis.eval(script, 1, lease, held.token)  # a's take or ack: refused
    assert await redis.eval(script, 1, lease, took.token) == b"ran"


async def test_recovery_frees_only_the_lost_incarnations_buckets(redis: aioredis.Redis) -> None:
    spider = uuid.uuid4().hex
    dead, alive = _leases(redis, spider, "dead"), _leases(redis, spider, "alive")
    for bucket in (1, 2):
        assert await dead.acquire(bucket) is not None
    assert await alive.acquire(4) is not None
    assert await free_incarnation(redis, "t", spider, "dead") == 2
    assert await alive.renew() == set()
    gained: list[Any] = [await alive.acquire(bucket) for bucket in (1, 2)]
    assert all(g is not None and not g.released for g in gained)


async def test_recovering_an_engine_returns_its_requests_and_frees_its_buckets(
    redis: aioredis.Redis,
) -> None:
    spider, prefix = uuid.uuid4().hex, f"t{uuid.uuid4().hex[:6]}"
    await redis.sadd(spiders_key(prefix), spider)
    dead = BucketLeases(redis, prefix, spider, "dead", ttl_ms=60_000)
    assert await dead.acquire(8) is not None
    assert await recover_engine(redis, prefix, "dead") == {spider: 0}
    gainer = BucketLeases(redis, prefix, spider, "gainer", ttl_ms=60_000)
    got = await gainer.acquire(8)  # at once: no TTL to wait out
    assert got is not None
    assert not got.released
