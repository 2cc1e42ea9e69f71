"""Who owns each host of a shared crawl: buckets, rendezvous hashing and bucket leases.

Large crawlers keep a host's politeness in one place by giving the host one owner
(BUbiNG's consistent hashing of hosts onto agents, StormCrawler's ``URLPartitioner``),
not by negotiating every request. Here:

* a host falls in one of ``buckets`` buckets (``bucket_of``: crc32 of its host key),
  so that ownership moves by the bucket, not by the host;
* a bucket's owner is the rendezvous-hash winner among the crawl's live members
  (``winner``: the engines whose znodes ``recovery.py`` watches): every engine computes
  the same answer from the same membership, and a join or a leave moves only the
  buckets the newcomer wins or the leaver held;
* what the hash says is made safe by a **bucket lease** in Redis (``BucketLeases``): the
  holder's incarnation and a fencing token, counted on by one per acquisition and never
  reused, with a TTL. Every script that starts work of a bucket (a take) checks the
  token (``owner_check``; an ack checks its request lease's owner, which is enough), so
  an engine that lost a bucket (a partition, a new member) starts nothing more of its
  hosts, whatever it still believes.

A graceful move writes each host's last start and current delay to the bucket's pace
key (on the Redis server's clock) before it deletes the lease; the gainer reads it in
the acquisition, as how long each host must still rest. A lease that ended any other
way (it expired, or recovery freed a dead incarnation's) has no such record: the gainer
then treats every host of the bucket as started at the acquisition.

Each bucket has its own hash tag, so each script touches one slot of a Redis Cluster
and the buckets spread over its masters. The renewal of all of an engine's leases is
therefore one pipeline (one round trip, one per master on a Cluster), not one script.
"""

from __future__ import annotations

import hashlib
import zlib
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from netdisco.frontiers.redis.leases import Client, Keys, recover_owner, return_leases, text

#: buckets per crawl: enough that three to a hundred engines share them evenly, few
#: enough that renewing every bucket's lease stays one small pipeline
BUCKETS = 256
#: how long a bucket's pace record is kept after the move that wrote it (s)
PACE_TTL = 3600


def bucket_of(host: str, buckets: int = BUCKETS) -> int:
    """The bucket a host key falls in: the same in every engine."""
    return zlib.crc32(host.encode()) % buckets


def _score(member: str, bucket: int) -> bytes:
    return hashlib.blake2b(f"{member}\0{bucket}".encode(), digest_size=8).digest()


def winner(bucket: int, members: Iterable[str]) -> str | None:
    """The member that owns ``bucket`` by rendezvous hashing (None: no member)."""
    return max(members, key=lambda member: _score(member, bucket), default=None)


def owned_by(member: str, members: Collection[str], buckets: int = BUCKETS) -> frozenset[int]:
    """The buckets ``member`` wins among ``members`` (none if it is not one of them)."""
    if member not in members:
        return frozenset()
    return frozenset(b for b in range(buckets) if winner(b, members) == member)


@dataclass(frozen=True)
class BucketKeys(Keys):
    """The keys of one bucket, under its own hash tag (``spider#b<i>``)."""

    @classmethod
    def of(cls, prefix: str, spider: str, bucket: int) -> BucketKeys:
        """Bucket ``bucket`` of ``spider``'s crawl."""
        return cls(prefix, spider, tag=f"{spider}#b{bucket}")

    @property
    def lease(self) -> str:
        """Hash (with a TTL): ``owner`` (an incarnation) and ``token``, while held."""
        return self._key("lease")

    @property
    def fence(self) -> str:
        """Counter: the last token handed out (never deleted, so a token is never reused)."""
        return self._key("fence")

    @property
    def pace(self) -> str:
        """Hash: host -> ``"<last start us> <delay us>"`` (Redis clock), written by a
        graceful move; ``released`` -> the token of the holder that wrote it."""
        return self._key("pace")


#: Redis's clock in microseconds (a pace outlives the engine that wrote it)
NOW_US_LUA = """
local t = redis.call('TIME')
local us = tonumber(t[1]) * 1000000 + tonumber(t[2])
"""

#: the check every take script of a bucket begins with: KEYS[k] the bucket's
#: lease, ARGV[t] the caller's token; a stale token answers ``STALE`` and runs nothing
OWNER_CHECK = """
if redis.call('HGET', KEYS[{k}], 'token') ~= ARGV[{t}] then
  return redis.error_reply('STALE bucket lease')
end
"""


def owner_check(lease_key: int, token_arg: int) -> str:
    """``OWNER_CHECK`` for a script whose lease key is KEYS[lease_key] and whose token
    is ARGV[token_arg] (1-based, as Lua counts)."""
    return OWNER_CHECK.replace("{k}", str(lease_key)).replace("{t}", str(token_arg))


#: KEYS lease, fence, pace; ARGV incarnation, ttl ms -> {0, holder} when another holds
#: it; else {token, released (1/0), host, rest left (us), ...}
ACQUIRE_LUA = (
    NOW_US_LUA
    + """
local holder = redis.call('HMGET', KEYS[1], 'owner', 'token')
if holder[1] and holder[1] ~= ARGV[1] then return {0, holder[1]} end
if holder[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {tonumber(holder[2]), 1}
end
local last = redis.call('GET', KEYS[2]) or '0'
local token = redis.call('INCR', KEYS[2])
redis.call('HSET', KEYS[1], 'owner', ARGV[1], 'token', token)
redis.call('PEXPIRE', KEYS[1], ARGV[2])
local released = redis.call('HGET', KEYS[3], 'released') == last and 1 or 0
local out = {token, released}
if released == 1 then
  local paces = redis.call('HGETALL', KEYS[3])
  for i = 1, #paces, 2 do
    if paces[i] ~= 'released' then
      local start, delay = string.match(paces[i + 1], '(%d+) (%d+)')
      local left = tonumber(start) + tonumber(delay) - us
      if left > 0 then
        out[#out + 1] = paces[i]
        out[#out + 1] = string.format('%.0f', left)
      end
    end
  end
end
redis.call('DEL', KEYS[3])
return out
"""
)

#: KEYS lease, pace; ARGV incarnation, token, then host, age (us since its last start),
#: delay (us) of each host -> 1, or 0 when the lease is not ours (nothing written)
RELEASE_LUA = (
    NOW_US_LUA
    + """
local holder = redis.call('HMGET', KEYS[1], 'owner', 'token')
if holder[1] ~= ARGV[1] or holder[2] ~= ARGV[2] then return 0 end
redis.call('DEL', KEYS[2])
for i = 3, #ARGV, 3 do
  local start = us - tonumber(ARGV[i + 1])
  redis.call('HSET', KEYS[2], ARGV[i], string.format('%.0f %.0f', start, tonumber(ARGV[i + 2])))
end
redis.call('HSET', KEYS[2], 'released', ARGV[2])
redis.call('EXPIRE', KEYS[2], PACE_TTL)
redis.call('DEL', KEYS[1])
return 1
""".replace("PACE_TTL", str(PACE_TTL))
)

#: KEYS lease; ARGV incarnation, token, ttl ms -> 1 (pushed on), 0 (not ours any more)
RENEW_LUA = """
local holder = redis.call('HMGET', KEYS[1], 'owner', 'token')
if holder[1] ~= ARGV[1] or holder[2] ~= ARGV[2] then return 0 end
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1
"""

#: KEYS lease; ARGV incarnation -> 1 if the lease was that incarnation's (deleted)
FREE_LUA = """
if redis.call('HGET', KEYS[1], 'owner') ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
return 1
"""


@dataclass(frozen=True)
class Acquired:
    """A bucket lease just acquired: its token, whether the holder before moved it
    gracefully, and how long each host it wrote must still rest (s)."""

    token: int
    released: bool
    rests: Mapping[str, float]


class BucketLeases:
    """One engine incarnation's bucket leases in one crawl (module docstring)."""

    def __init__(
        self, redis: Client, prefix: str, spider: str, incarnation: str, *, ttl_ms: int
    ) -> None:
        self.redis, self.prefix, self.spider = redis, prefix, spider
        self.incarnation, self.ttl_ms = incarnation, ttl_ms
        self.tokens: dict[int, int] = {}  # bucket -> our token, while we hold it

    def keys(self, bucket: int) -> BucketKeys:
        """The keys of ``bucket``."""
        return BucketKeys.of(self.prefix, self.spider, bucket)

    async def acquire(self, bucket: int) -> Acquired | None:
        """Take ``bucket``'s lease if nobody holds it (None: another incarnation does)."""
        return (await self.acquire_all([bucket]))[bucket]

    async def acquire_all(self, buckets: Iterable[int]) -> dict[int, Acquired | None]:
        """``acquire`` for each of ``buckets``, in one pipeline (one round trip, one per
        master on a Cluster): a start or a change of members wins many at once."""
        wanted = sorted(set(buckets))
        if not wanted:
            return {}
        async with self.redis.pipeline(transaction=False) as pipe:
            for bucket in wanted:
                k = self.keys(bucket)
                pipe.eval(ACQUIRE_LUA, 3, k.lease, k.fence, k.pace, self.incarnation, self.ttl_ms)
            answers = await pipe.execute()
        return {b: self._acquired(b, raw) for b, raw in zip(wanted, answers, strict=True)}

    def _acquired(self, bucket: int, raw: list[Any]) -> Acquired | None:
        token = int(raw[0])
        if not token:
            return None
        self.tokens[bucket] = token
        pairs = [text(x) for x in raw[2:]]
        rests = {host: int(us) / 1e6 for host, us in zip(pairs[::2], pairs[1::2], strict=True)}
        return Acquired(token, bool(int(raw[1])), rests)

    async def release(self, bucket: int, paces: Mapping[str, tuple[float, float]]) -> bool:
        """Hand ``bucket`` on: each host's (seconds since its last start, its delay) go
        to the pace key, then the lease is deleted. False: it was not ours any more."""
        token = self.tokens.pop(bucket, None)
        if token is None:
            return False
        k = self.keys(bucket)
        args: list[Any] = [k.lease, k.pace, self.incarnation, token]
        for host, (age, delay) in paces.items():
            args += [host, round(max(age, 0.0) * 1e6), round(max(delay, 0.0) * 1e6)]
        return bool(await self.redis.eval(RELEASE_LUA, 2, *args))

    async def renew(self) -> set[int]:
        """Push every lease we hold on, in one pipeline; the buckets we lost (forgotten)."""
        held = sorted(self.tokens)
        if not held:
            return set()
        async with self.redis.pipeline(transaction=False) as pipe:
            for bucket in held:
                lease, token = self.keys(bucket).lease, self.tokens[bucket]
                pipe.eval(RENEW_LUA, 1, lease, self.incarnation, token, self.ttl_ms)
            answers = await pipe.execute()
        lost = {bucket for bucket, ok in zip(held, answers, strict=True) if not int(ok)}
        for bucket in lost:
            del self.tokens[bucket]
        return lost


async def free_incarnation(
    redis: Client, prefix: str, spider: str, incarnation: str, buckets: int = BUCKETS
) -> int:
    """Delete a lost incarnation's bucket leases (recovery), so that the new owners need
    not wait out their TTL; how many it held."""
    async with redis.pipeline(transaction=False) as pipe:
        for bucket in range(buckets):
            pipe.eval(FREE_LUA, 1, BucketKeys.of(prefix, spider, bucket).lease, incarnation)
        answers = await pipe.execute()
    return sum(int(answer) for answer in answers)


async def recover_engine(redis: Client, prefix: str, incarnation: str) -> dict[str, int]:
    """A lost incarnation's work back, in every spider under ``prefix``: its request
    leases to the queues (``recover_owner``, and the buckets' queues of owned hosts),
    it leaves the members and its bucket leases are freed, so that the buckets' new
    owners start at once instead of after the TTL; spider -> requests."""
    returned = await recover_owner(redis, prefix, incarnation)
    for spider in returned:
        buckets = [BucketKeys.of(prefix, spider, b) for b in range(BUCKETS)]
        returned[spider] += await return_leases(redis, buckets, incarnation)
        await redis.zrem(Keys(prefix, spider).members, incarnation)
        await free_incarnation(redis, prefix, spider, incarnation)
    return returned
