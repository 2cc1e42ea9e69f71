"""Leases in Redis: who holds which request, until when, and how they go back.

A request taken from a Redis frontier is leased to the engine incarnation that
took it: recorded with its owner and a deadline on the Redis server's clock, and
acknowledged by ``done``. The scripts here put leases back in the queue on three
paths: a lost engine (``recover_owner``, called by
:mod:`netdisco.frontiers.redis.recovery`), an owner gone silent (``sweep_expired``,
run on every heartbeat), and a graceful stop (``return_leases``). Each is one
atomic script that checks the owner per id, so several engines running the same
recovery at once return every lease exactly once.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from redis import asyncio as aioredis
from redis.asyncio.cluster import RedisCluster

DEFAULT_PREFIX = "netdisco"

#: a single Redis server or a Redis Cluster (``options.connect`` makes either)
Client = aioredis.Redis | RedisCluster

#: Redis's clock in ms: every engine measures deadlines with the same clock.
NOW_LUA = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
"""

#: A stored request's priority, in either format it is queued in (netdisco.crawl.codec):
#: the compact one (first byte 1, then MessagePack; ``p`` left out when 0) or JSON.
PRIORITY_LUA = """
local function priority(body)
  if string.byte(body, 1) == 1 then
    return tonumber(cmsgpack.unpack(string.sub(body, 2))['p']) or 0
  end
  return cjson.decode(body)['priority']
end
"""

# Requeue one leased id: its priority travels in the stored request (cjson and cmsgpack
# are built in).
REQUEUE_LUA = (
    PRIORITY_LUA
    + """
local function requeue(k_queue, k_payload, id)
  local body = redis.call('HGET', k_payload, id)
  if body then redis.call('ZADD', k_queue, -priority(body), id) end
  return body and 1 or 0
end
"""
)

#: KEYS owned, owner, leases, queue, payload; ARGV owner -> number returned
RETURN_LUA = (
    REQUEUE_LUA
    + """
local n = 0
for _, id in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  if redis.call('HGET', KEYS[2], id) == ARGV[1] then
    redis.call('HDEL', KEYS[2], id)
    redis.call('ZREM', KEYS[3], id)
    n = n + requeue(KEYS[4], KEYS[5], id)
  end
end
redis.call('DEL', KEYS[1])
return n
"""
)

#: KEYS leases, owner, queue, payload; ARGV owned-key prefix, limit -> number returned
SWEEP_LUA = (
    REQUEUE_LUA
    + NOW_LUA
    + """
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[2]))
for _, id in ipairs(ids) do
  local who = redis.call('HGET', KEYS[2], id)
  if who then redis.call('SREM', ARGV[1] .. who, id) end
  redis.call('HDEL', KEYS[2], id)
  redis.call('ZREM', KEYS[1], id)
  requeue(KEYS[3], KEYS[4], id)
end
return #ids
"""
)


#: KEYS owned, leases; ARGV ttl ms -> the ids we hold (their deadlines pushed on)
BEAT_LUA = (
    NOW_LUA
    + """
local ids = redis.call('SMEMBERS', KEYS[1])
for _, id in ipairs(ids) do redis.call('ZADD', KEYS[2], 'XX', now + tonumber(ARGV[1]), id) end
return ids
"""
)


@dataclass(frozen=True)
class Keys:
    """The Redis keys of one spider's frontier, or of one of its buckets (``owners``).

    ``{tag}`` is a cluster hash tag: every key of a tag is in one slot, so each script
    runs on one node. The plain frontier's tag is the spider's name.
    """

    prefix: str
    spider: str
    tag: str = ""

    def _key(self, name: str) -> str:
        return f"{self.prefix}:{{{self.tag or self.spider}}}:{name}"

    @property
    def members(self) -> str:
        """Sorted set: member id -> its deadline (ms, Redis clock), where no ZooKeeper
        says who is alive (``ownership.RedisMembers``)."""
        return self._key("members")

    @property
    def epoch_all(self) -> str:
        """String, on shard 0 only: the epoch once every shard holds it (see ``join``)."""
        return self._key("epoch_all")

    @property
    def queue(self) -> str:
        """Sorted set: request id by score ``-priority`` (ties: id order, so FIFO)."""
        return self._key("queue")

    @property
    def payload(self) -> str:
        """Hash: request id -> the request as JSON, while queued or leased."""
        return self._key("req")

    @property
    def seen(self) -> str:
        """Set of 16-byte fingerprints (``seen=exact``)."""
        return self._key("seen")

    @property
    def bloom(self) -> str:
        """The growing Bloom filter's bitmap (``seen=bloom``)."""
        return self._key("bloom")

    def seen_store(self, bloom: bool) -> str:
        """Where the seen URLs are, in either mode."""
        return self.bloom if bloom else self.seen

    @property
    def seen_count(self) -> str:
        """Counter of distinct fingerprints (Bloom mode cannot count itself)."""
        return self._key("seen_n")

    @property
    def seq(self) -> str:
        """Counter that numbers request ids."""
        return self._key("seq")

    @property
    def epoch(self) -> str:
        """String: a random id written when the crawl is created; every script checks it."""
        return self._key("epoch")

    @property
    def leases(self) -> str:
        """Sorted set: leased request id by deadline (ms, Redis clock)."""
        return self._key("leases")

    @property
    def owner(self) -> str:
        """Hash: leased request id -> the incarnation holding it."""
        return self._key("owner")

    @property
    def owned_prefix(self) -> str:
        """Prefix of the per-incarnation sets of leased ids."""
        return self._key("owned:")

    @property
    def added_channel(self) -> str:
        """Pub/sub channel: how many requests an ``add`` queued (wakes idle workers)."""
        return self._key("added")

    def take_token(self, token: str) -> str:
        """String: the id one take leased, so that its retry finds it (expires)."""
        return self._key(f"take:{token}")

    def owned(self, owner: str) -> str:
        """Set of ids leased by ``owner``: what recovery drains."""
        return self.owned_prefix + owner


def text(value: object) -> str:
    """A Redis answer (bytes, or already text) as text."""
    return value.decode() if isinstance(value, bytes) else str(value)


def spiders_key(prefix: str) -> str:
    """Set of spider names that have a frontier under ``prefix``."""
    return f"{prefix}:spiders"


async def _each_shard(
    redis: Client, shards: Sequence[Keys], script: str, call: Callable[[Keys], list[Any]]
) -> list[Any]:
    """``script`` once per shard, in one pipeline (one round trip, one per master on a
    Cluster): a crawl of many shards or buckets pays one trip, not one a shard."""
    async with redis.pipeline(transaction=False) as pipe:
        for keys in shards:
            args = call(keys)
            pipe.eval(script, args[0], *args[1:])
        return list(await pipe.execute())


async def return_leases(redis: Client, shards: Sequence[Keys], owner: str) -> int:
    """Put every request ``owner`` holds back in the queue; how many went back."""

    def call(k: Keys) -> list[Any]:
        return [5, k.owned(owner), k.owner, k.leases, k.queue, k.payload, owner]

    return sum(int(n) for n in await _each_shard(redis, shards, RETURN_LUA, call))


async def renew_leases(redis: Client, shards: Sequence[Keys], owner: str, ttl_ms: int) -> set[str]:
    """Push the deadlines of ``owner``'s leases on; the ids it holds in Redis."""

    def call(k: Keys) -> list[Any]:
        return [2, k.owned(owner), k.leases, ttl_ms]

    found = await _each_shard(redis, shards, BEAT_LUA, call)
    return {item.decode() for raw in found for item in raw}


async def sweep_expired(redis: Client, shards: Sequence[Keys], limit: int = 1000) -> int:
    """Requeue leases past their deadline (their owner stopped renewing them)."""

    def call(k: Keys) -> list[Any]:
        return [4, k.leases, k.owner, k.queue, k.payload, k.owned_prefix, limit]

    return sum(int(n) for n in await _each_shard(redis, shards, SWEEP_LUA, call))


async def recover_owner(redis: Client, prefix: str, owner: str) -> dict[str, int]:
    """Return ``owner``'s leases in every spider under ``prefix``; spider -> count."""
    names = await redis.smembers(spiders_key(prefix))
    counts = {}
    for raw in sorted(names):
        name = raw.decode() if isinstance(raw, bytes) else str(raw)
        counts[name] = await return_leases(redis, [Keys(prefix, name)], owner)
    return counts
