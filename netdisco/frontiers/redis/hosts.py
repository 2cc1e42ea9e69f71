"""Host queues: a Redis frontier whose per-host limits hold for every engine together.

Without them each engine keeps its own ``per_host_concurrency`` and
``download_delay``, so N engines hit a host N times as hard. Here the frontier
keeps one queue per host and reserves the host's slot in the take itself (one
Lua script, ``host_scripts``), on the Redis server's clock; the crawl then keeps
no limits of its own (``Frontier.reserves_hosts``). A host that is busy or waiting out its
delay is simply not picked, so it never holds a worker, and a worker is never
handed a request it may not start yet. Requests the lease scripts put back
(recovery, sweep, hand-back) land in the plain queue, the *inbox*, and the next
take returns them to their host queues, freeing their slots.

A take leases one request for each worker waiting (``prefetch`` at least), so that
none waits a round trip of its own; acknowledgements ride on it (fewer round trips).

With ``shards`` > 1 (the default on a Redis Cluster) each host belongs to one of
several shards, each a full set of these keys under its own hash tag: every script
touches one slot, so it runs on one node, and the hosts spread over the masters. A
take asks the shard that is due first (each answer says when a shard may have work;
a script that makes a host ready publishes the shard's key prefix, which wakes us).
"""

from __future__ import annotations

import asyncio
import math
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import structlog

from netdisco._tasks import wait_event
from netdisco.exceptions import ConfigError
from netdisco.frontiers.base import Codec, Queued, R
from netdisco.frontiers.redis.batching import by_shard
from netdisco.frontiers.redis.frontier import RedisFrontier
from netdisco.frontiers.redis.host_scripts import (
    HOST_ADD_LUA,
    HOST_DONE_LUA,
    HOST_TAKE_LUA,
    UNSENT,
    HostKeys,
)
from netdisco.frontiers.redis.leases import Client, Keys, shard_of
from netdisco.frontiers.redis.options import RedisOptions
from netdisco.frontiers.redis.replication import eval_replicated, replicas_for

log = structlog.get_logger(__name__)
T = TypeVar("T")

#: how long a take waits for a host to be due before it says there is nothing (s)
TAKE_WAIT = 1.0
#: how long a shard that had nothing for us is not asked again, unless woken (s)
SHARD_REST = 0.1
#: how long a finished request's ack waits for a take to carry it (s); then it goes alone
ACK_WAIT = 0.005
#: how long one engine may take to fetch a robots.txt before another tries (s)
ROBOTS_LOCK = 30
#: how many times an add is sent until a replica confirms it (``replication``)
ADD_TRIES = 5
#: how long a host's own pace is kept in Redis after its last change (s)
PACE_TTL = 86_400
#: the longest delay written for a host (s), and how many hosts' paces we remember
PACE_MAX = 86_400.0
PACE_HOSTS = 100_000


class HostQueueFrontier(RedisFrontier[R]):
    """A ``RedisFrontier`` with one queue per host and cluster-wide per-host limits.

    Every engine sharing the crawl must use the same ``download_delay``,
    ``per_host_concurrency`` and ``shards`` (they run one spider's settings).
    It reserves hosts and shares robots.txt (``Frontier``'s host abilities).
    """

    reserves_hosts = True

    def __init__(
        self,
        options: RedisOptions,
        name: str,
        codec: Codec[R],
        *,
        owner: str | None = None,
        redis: Client | None = None,
    ) -> None:
        super().__init__(options, name, codec, owner=owner, redis=redis)
        self.keys: HostKeys = HostKeys(options.prefix, name)
        self.shard_keys: Sequence[HostKeys] = self.keys.shards(options.shards)
        self._host_add = self._redis.register_script(HOST_ADD_LUA)
        self._host_take = self._redis.register_script(HOST_TAKE_LUA)
        self._host_done = self._redis.register_script(HOST_DONE_LUA)
        self._delay_us = 0
        self._per_host = 8
        self._paces: dict[str, tuple[int, int]] = {}  # host -> its pace as last written
        self._stricter: dict[str, float] = {}  # host -> when we made its pace stricter
        self._asked: dict[str, float] = {}  # id -> when the take that leased it was sent
        self._taking = asyncio.Lock()
        self._wanting = 0  # workers in take(): a take asks Redis for one each
        self._ended: dict[str, float] = {}  # id -> when its response ended (monotonic)
        self._freeing: list[str] = []  # downloads over, slots not freed in Redis yet
        self._unsent: set[str] = set()  # of those, ones that sent nothing (robots.txt)
        self._due = [0.0] * options.shards  # shard -> when to ask it again (loop time)
        self._idle = [False] * options.shards  # shard -> had nothing queued or leased
        self._turn = 0  # the shard asked first when several are due (round robin)
        self._shard_by_prefix = {k.host_prefix: i for i, k in enumerate(self.shard_keys)}

    def set_politeness(self, delay: float, per_host: int) -> None:
        """With a delay, one slot a host: each start waits for the last end plus the delay."""
        if not (math.isfinite(delay) and delay >= 0):
            raise ConfigError("download_delay", f"must be a finite number >= 0, not {delay!r}")
        if per_host < 1:
            raise ConfigError("per_host_concurrency", f"must be at least 1, not {per_host!r}")
        self._delay_us = round(delay * 1_000_000)
        self._per_host = 1 if self._delay_us else per_host

    async def pace(self, request: R, delay: float, per_host: int) -> bool:
        """Write a host's own delay and slots where the scripts read them, when they
        moved by more than a tenth (autothrottle moves a little with every answer).

        A pace stricter than the crawl's at first sight, or with fewer slots than
        before, makes every request of the host leased by a take sent before it was
        written stale: its slot was reserved under the old pace.
        """
        rid = self._ids.get(id(request))
        asked = self._asked.pop(rid, math.inf) if rid is not None else math.inf
        host = request.host_key
        delay_us = round(min(max(delay, 0.0), PACE_MAX) * 1_000_000)
        slots = 1 if delay_us else max(per_host, 1)
        known = self._paces.get(host)
        known_us, known_slots = known or (self._delay_us, self._per_host)
        if slots != known_slots or abs(delay_us - known_us) > known_us / 10:
            if len(self._paces) >= PACE_HOSTS:  # bounded: writing again is harmless
                self._paces.clear()
                self._stricter.clear()
            self._paces[host] = (delay_us, slots)
            stricter = slots < known_slots or (known is None and delay_us > known_us)
            if stricter:  # until it is written, every request of the host is stale
                self._stricter[host] = math.inf
            key = self.shard_keys[self._shard(host)].pace(host)
            await self._call(lambda: self._redis.hset(key, mapping={"d": delay_us, "c": slots}))
            await self._call(lambda: self._redis.expire(key, PACE_TTL))
            if stricter:
                self._stricter[host] = time.monotonic()
        return asked < self._stricter.get(host, -math.inf)

    def responded(self, request: R) -> None:
        """The whole response is here: the host's delay runs from now, not from the ack."""
        rid = self._ids.get(id(request))
        if rid is not None:
            self._ended[rid] = time.monotonic()

    def fetched(self, request: R, *, sent: bool = True) -> None:
        """The download is over: free the host's slot now (soon, batched), not at the ack.

        The ack waits for the items' flush (``flush_interval``); the slot need not: the
        lease stays until the ack, so a crash in between still loses nothing. Nothing
        ``sent``: the free hands the host's turn back (``UNSENT`` credit).
        """
        rid = self._ids.get(id(request))
        if rid is not None:
            self._asked.pop(rid, None)
            self._freeing.append(rid)
            if not sent:
                self._unsent.add(rid)
            self._start_flusher()

    def _frees(self, shard: int | None = None) -> list[str]:
        """Take the slots to free (of ``shard``, or all); an ack on its way frees its own,
        but for one that sent nothing (its free gives the turn back, the ack would not)."""
        acked = set(self._acks)
        mine = {r for r in self._freeing if shard is None or self._shard_of_id(r) == shard}
        self._freeing = [r for r in self._freeing if r not in mine]
        return [r for r in mine if r not in acked or r in self._unsent]

    def _credit(self, rid: str) -> list[str]:
        """``[id, us since its response ended]`` (a duration: no clock is compared), or
        ``UNSENT`` when nothing was sent."""
        ended = self._ended.pop(rid, None)
        if rid in self._unsent:
            self._unsent.discard(rid)
            return [rid, UNSENT]
        return [rid, "0" if ended is None else str(int((time.monotonic() - ended) * 1e6))]

    async def back_off(self, request: R, seconds: float) -> None:
        """Put ``request`` back (as it is now: attempts counted) and rest its host."""
        rid = self._forget(request)
        if rid is None:
            return
        self._asked.pop(rid, None)
        self._freeing = [r for r in self._freeing if r != rid]  # the back-off frees it
        wait = round(max(seconds, 0.0) * 1_000_000)
        triple: list[str | bytes] = [rid, self.codec.pack(request), *self._credit(rid)[1:]]
        shard = self._shard_of_id(rid)
        await self._call(lambda: self._finish(shard, triple, what="1", wait_us=wait))

    async def robots_txt(
        self, origin: str, fetch: Callable[[], Awaitable[str | None]], max_age: float
    ) -> str | None:
        """The cached rules; else the engine that locks the origin fetches, the rest wait."""
        key = self.shard_keys[self._shard(origin)].robots(origin)
        while (cached := await self._call(lambda: self._redis.get(key))) is None:
            if await self._call(lambda: self._lock(f"{key}:lock")):
                return await self._keep(key, await fetch(), max_age)
            await asyncio.sleep(0.05)
        return cached.decode() if isinstance(cached, bytes) else str(cached)

    async def _keep(self, key: str, text: str | None, max_age: float) -> str | None:
        """Share an answer; an unreachable site is not shared (the next asker tries)."""
        if text is None:
            await self._call(lambda: self._redis.delete(f"{key}:lock"))
        else:
            ttl = max(1, int(max_age))
            await self._call(lambda: self._redis.set(key, text, ex=ttl))
        return text

    def _lock(self, key: str) -> Awaitable[Any]:
        """Ours for ``ROBOTS_LOCK`` s: if we die meanwhile, another engine fetches."""
        return self._redis.set(key, self.owner, nx=True, ex=ROBOTS_LOCK)

    async def take(self) -> R | None:
        self._wanting += 1
        try:
            async with self._taking:  # one worker asks Redis at a time; the rest use its batch
                return await super().take()
        finally:
            self._wanting -= 1

    # -- shards ------------------------------------------------------------------------

    def _shard(self, host: str) -> int:
        return shard_of(host, len(self.shard_keys))

    def _shard_of_id(self, rid: str) -> int:
        """Ids end in ``s<shard>`` when there are shards (see ``_nonce``)."""
        return int(rid.rpartition("s")[2]) if len(self.shard_keys) > 1 else 0

    def _nonce(self, shard: int) -> str:
        """Makes one add's ids unique, even if Redis rolled ``seq`` back; names the shard."""
        nonce = uuid.uuid4().hex[:8]
        return f"{nonce}s{shard}" if len(self.shard_keys) > 1 else nonce

    def _woken(self, data: Any) -> None:
        """A script published a shard's key prefix (anything else: ask every shard)."""
        text = data.decode() if isinstance(data, bytes) else str(data)
        shard = self._shard_by_prefix.get(text)
        for index in range(len(self._due)) if shard is None else (shard,):
            self._due[index] = 0.0

    # -- hooks of RedisFrontier ---------------------------------------------------------

    def _entry(self, request: R, body: bytes) -> list[str | bytes]:
        return [*super()._entry(request, body)[:3], request.host_key, body]

    async def _add_entries(self, rows: list[list[str | bytes]]) -> list[Any]:
        return await by_shard(rows, lambda row: self._shard(str(row[3])), self._add_in)

    async def _add_in(self, shard: int, rows: list[list[str | bytes]]) -> list[Any]:
        k, nonce = self.shard_keys[shard], self._nonce(shard)
        seen = k.seen_store(self._bloom)
        keys = [*self._host_keys(shard, k.add_token(nonce)), seen, k.seen_count, k.seq]
        args: list[str | int | bytes] = [*self._prelude(shard), self._seen_mode]
        args += [nonce, *(x for row in rows for x in row)]
        add = self._host_add
        return list(await self._call(lambda: self._replicated(add, keys, args, ADD_TRIES)))

    async def _replicated(
        self, script: Any, keys: list[str], args: list[Any], tries: int = 1
    ) -> Any:
        """Run ``script``; with ``replicas``, its writes reach them before it counts: an add's
        links, and with ``wait=all`` a take's lease and slot (``replication``)."""
        wanted = replicas_for(self._redis, keys[0], self.options.replicas)
        if not wanted:
            return await script(keys=keys, args=args)
        done = self._confirmations
        return await eval_replicated(self._redis, script.script, keys, args, wanted, done, tries)

    async def _claim_all(self, requests: Sequence[Queued]) -> list[Any]:
        return await by_shard(
            requests,
            lambda r: self._shard(r.host_key),
            lambda s, rs: self._claim_in(self.shard_keys[s], rs),
        )

    def _count_queued(self, pipe: Any, keys: Keys) -> None:
        assert isinstance(keys, HostKeys)  # one of ours (shard_keys)
        pipe.get(keys.hosted)

    async def _take_batch(self) -> Any:
        """Requests; if no host is due, wait for the first to be (or for a wake-up) and
        ask again, for up to ``TAKE_WAIT``: a worker here has nothing else to do."""
        loop = asyncio.get_running_loop()
        end = loop.time() + TAKE_WAIT
        while True:
            wake = self._work  # taken before asking, so no notice slips in between
            found = await self._take_once()
            left = end - loop.time()
            if not isinstance(found, int) or found <= 0 or left <= 0:
                return found
            await wait_event(wake, min(found / 1_000_000, left))

    async def _take_once(self) -> Any:
        """Ask the due shards, in turn, until one hands out requests; else how long (us)
        until one may (0: every shard has nothing queued or leased at all).

        With several shards, one that had nothing for us rests ``SHARD_REST`` (one with
        nothing queued or leased at all ``TAKE_WAIT``) unless a wake-up names it, so that
        a take does not cost a round trip per shard.
        """
        now = asyncio.get_running_loop().time()
        wake = self._work  # a wake-up while we ask makes the answers stale
        count = len(self._due)
        order = [(self._turn + i) % count for i in range(count)]
        waits = []
        for shard in [s for s in order if self._due[s] <= now]:
            found = await self._take_in(shard)
            self._idle[shard] = found == 0
            if not isinstance(found, int):
                self._turn = (shard + 1) % count
                return found
            if count > 1 and not wake.is_set():  # an add wakes an idle shard
                self._due[shard] = now + (SHARD_REST if found else TAKE_WAIT)
            waits += [found] if found else []
        if all(self._idle):
            return 0
        resting = [int((due - now) * 1_000_000) for due in self._due if due > now]
        return max(1, min([*waits, *resting], default=1))

    async def _take_in(self, shard: int) -> Any:
        token = self.shard_keys[shard].take_token(uuid.uuid4().hex)  # the same for every retry
        frees = self._frees(shard)
        acks = [rid for rid in self._acks if self._shard_of_id(rid) == shard]
        self._acks = [rid for rid in self._acks if self._shard_of_id(rid) != shard]
        ttl, count = self._ttl_ms, max(self.options.prefetch, self._wanting)
        args = [*self._prelude(shard), self.owner, ttl, count, len(frees)]
        args += [x for rid in frees + acks for x in self._credit(rid)]
        keys = self._host_keys(shard, token)
        asked = time.monotonic()
        try:
            if self.options.wait == "all":
                found = await self._call(lambda: self._replicated(self._host_take, keys, args))
            else:
                found = await self._call(lambda: self._host_take(keys=keys, args=args))
        finally:
            self._unacked.difference_update(acks)
        if isinstance(found, list):  # requests (else how long until one is due)
            self._asked.update((_text(rid), asked) for rid in found[::2])
        return found

    async def _release(self, rids: list[str], *, requeue: bool, what: str = "") -> None:
        """End our leases (put back with ``requeue``), or with ``what="2"`` free their slots."""

        async def release(shard: int, some: list[str]) -> list[None]:
            triples = [x for r in some for x in (r, "", self._credit(r)[1])]
            flag = what or ("1" if requeue else "0")
            await self._call(lambda: self._finish(shard, triples, what=flag))
            return [None] * len(some)

        await by_shard(rids, self._shard_of_id, release)

    def _finish(
        self, shard: int, triples: Sequence[str | bytes], *, what: str, wait_us: int = 0
    ) -> Awaitable[Any]:
        args = [*self._prelude(shard), self.owner, what, wait_us, *triples]
        return self._host_done(keys=self._host_keys(shard), args=args)

    async def _flush(self) -> None:
        """Free slots, then send acks; a take in the meantime carries them (fewer trips)."""
        await asyncio.sleep(ACK_WAIT)
        while self._freeing or self._acks:
            if frees := self._frees():
                try:
                    await self._release(frees, requeue=False, what="2")
                except Exception as exc:  # not freed: the ack or the lease's return frees it
                    log.debug("frontier_free_failed", count=len(frees), error=repr(exc))
            await super()._flush()

    def _host_keys(self, shard: int, token: str = "") -> list[str]:
        k = self.shard_keys[shard]
        return [
            k.ready,
            k.next_start,
            k.hostof,
            k.hosted,
            k.queue,
            k.payload,
            k.leases,
            k.owner,
            k.owned(self.owner),
            k.trace,
            k.epoch,
            token or k.take_token("-"),
        ]

    def _prelude(self, shard: int) -> list[str | int]:
        trace = "1" if self.options.trace else "0"
        pre = self.shard_keys[shard].host_prefix
        return [pre, self._delay_us, self._per_host, trace, self.keys.added_channel, self.epoch]


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
