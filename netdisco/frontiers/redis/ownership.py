"""Who is a member, and the move of buckets that follows a change of members.

``owners`` says who should own a bucket (rendezvous hashing over the members) and makes
it safe (bucket leases with fencing tokens). This module drives it:

* **members.** With ZooKeeper the members are the engines whose znodes ``recovery.py``
  watches (``LeaseRecovery.view``). Without it (``-j N`` on a private Redis, the tests,
  a Redis crawl run standalone) there are no znodes to hash over, so each engine writes
  its id with a deadline on the Redis clock to the crawl's ``members`` sorted set
  (``RedisMembers``), pushed on by its heartbeat; an entry past its deadline is no
  member. One source per crawl, never both: two sources could disagree on who wins.
* **the move** (``Ownership.settle``): renew what we hold, stop starting what another
  member now wins (*leaving*: the caller lets its in-flight requests of the bucket end,
  then ``hand_off`` releases it with each host's pace), acquire what we now win. A
  bucket another engine still holds (it drains, or it died and its TTL runs) is
  *waiting*: the next settle tries again.
* **the local fence** (``Ownership.may_start``): a bucket's hosts start only while its
  last renewal's TTL, counted from when the renewal was sent, has not run out, so an
  engine cut from Redis stops before Redis can hand the bucket to another.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass

from netdisco.frontiers.redis.leases import NOW_LUA, Client, Keys
from netdisco.frontiers.redis.owners import BUCKETS, Acquired, BucketLeases, bucket_of, owned_by

#: the share of a bucket lease's TTL this engine starts requests in after renewing it: a
#: request checked just before it ran out may still go out a little later (a stall)
TRUSTED = 2 / 3

#: KEYS members; ARGV id, ttl ms (0: leave) -> the live members' ids
MEMBERS_LUA = (
    NOW_LUA
    + """
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if tonumber(ARGV[2]) > 0 then
  redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
else
  redis.call('ZREM', KEYS[1], ARGV[1])
end
return redis.call('ZRANGE', KEYS[1], 0, -1)
"""
)


class RedisMembers:
    """The crawl's members from Redis, where no ZooKeeper says who is alive."""

    def __init__(
        self, redis: Client, prefix: str, spider: str, member: str, *, ttl_ms: int
    ) -> None:
        self.redis, self.member, self.ttl_ms = redis, member, ttl_ms
        self.key = Keys(prefix, spider).members

    async def beat(self) -> frozenset[str]:
        """Push our deadline on (joining the first time); the live members, us included."""
        return await self._call(self.ttl_ms)

    async def leave(self) -> frozenset[str]:
        """Stop being a member (a graceful stop); the members left."""
        return await self._call(0)

    async def _call(self, ttl_ms: int) -> frozenset[str]:
        raw = await self.redis.eval(MEMBERS_LUA, 1, self.key, self.member, ttl_ms)
        return frozenset(x.decode() if isinstance(x, bytes) else str(x) for x in raw)


@dataclass(frozen=True)
class Moves:
    """What one ``settle`` changed: buckets acquired (with the rests their hosts owe),
    buckets found lost (another holds them now), buckets another member now wins that we
    still hold (``leaving``: nothing of them starts; ``hand_off`` each once its in-flight
    requests ended), and buckets we win that another still holds (``waiting``)."""

    gained: Mapping[int, Acquired]
    lost: frozenset[int]
    leaving: frozenset[int]
    waiting: frozenset[int]


#: each host of a bucket we hand on -> (seconds since its last start, its delay)
Pace = Mapping[str, tuple[float, float]]


class Ownership:
    """One engine incarnation's buckets, moved to follow the members (module docstring)."""

    def __init__(self, leases: BucketLeases, member: str, buckets: int = BUCKETS) -> None:
        self.leases, self.member, self.buckets = leases, member, buckets
        self._renewed = -float("inf")  # monotonic: when the last renewal was sent
        self._leaving: frozenset[int] = frozenset()  # held, but another member wins them

    @property
    def held(self) -> frozenset[int]:
        """The buckets whose lease we hold, as far as we know."""
        return frozenset(self.leases.tokens)

    @property
    def leaving(self) -> frozenset[int]:
        """Buckets we hold that another member now wins: nothing of them starts here,
        and each goes (``hand_off``) once its requests in flight have ended."""
        return self._leaving

    def token(self, host: str) -> int | None:
        """The token a take of ``host``'s requests carries (None: not ours to start,
        or leaving)."""
        bucket = bucket_of(host, self.buckets)
        return None if bucket in self._leaving else self.leases.tokens.get(bucket)

    def may_start(self, host: str) -> bool:
        """Whether a request of ``host`` may start here now: its bucket is ours, not
        leaving, and ``TRUSTED`` of the last renewal's TTL has not run out since it was
        sent (the rest covers a stalled loop between this check and the send, and the
        drift between our clock and Redis's)."""
        trusted = TRUSTED * self.leases.ttl_ms / 1000
        return self.token(host) is not None and time.monotonic() < self._renewed + trusted

    async def settle(self, members: Collection[str]) -> Moves:
        """Renew; stop starting what another member now wins; acquire what we win."""
        sent = time.monotonic()
        lost = await self.leases.renew()
        wanted = owned_by(self.member, members, self.buckets)
        self._leaving = self.held - wanted
        tried = await self.leases.acquire_all(wanted - self.held)
        gained = {bucket: got for bucket, got in tried.items() if got is not None}
        self._renewed = sent  # a lease acquired since is younger: the bound still holds
        waiting = wanted - self.held
        return Moves(gained, frozenset(lost), self._leaving, frozenset(waiting))

    async def hand_off(self, bucket: int, pace: Pace) -> bool:
        """Release a bucket we hold with each host's pace, for the next owner (False:
        it was not ours any more). Call it once nothing of the bucket is in flight."""
        self._leaving -= {bucket}
        return await self.leases.release(bucket, pace)

    async def give_up(self, paces: Callable[[int], Pace]) -> None:
        """Hand every bucket on (a graceful stop): the next owners get the paces."""
        for bucket in sorted(self.held):
            await self.hand_off(bucket, paces(bucket))
