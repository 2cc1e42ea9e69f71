"""Owned hosts (``politeness=owner``, the default): each host's queue is served by one
engine at a time, which keeps the host's politeness in its own memory.

Negotiating every request with Redis (a script to reserve the host's slot and delay,
another to free it, a wake-up to pass the turn on) cost about 15 ms of coordination a
request, and made three engines slower than one. Large crawlers give each host one
owner instead (BUbiNG, StormCrawler's ``URLPartitioner``); so does this frontier:

* requests are queued by **bucket** (``owners.bucket_of`` of their host), each bucket a
  full set of the plain frontier's keys under its own hash tag, so the buckets spread
  over a Redis Cluster's masters;
* the engine owns the buckets it wins by rendezvous hashing over the crawl's members
  (``ownership``), made safe by a bucket lease with a fencing token that every take
  carries; it takes requests of its buckets in batches, one pipeline for several
  buckets, and acknowledges them in batches;
* the crawl's own ``Politeness`` (slots, delay, autothrottle, Retry-After,
  Crawl-delay, giving up) then applies to them, exactly as in a standalone crawl: the
  frontier does not reserve hosts.

Members come from the crawl's ``members`` key in Redis, pushed on every ``OWNER_BEAT``
(``RedisMembers``); ZooKeeper's lease recovery (and ``-j N``'s parent) removes a lost
engine from it and frees its buckets at once (``owners.recover_engine``). A move keeps
politeness: a bucket that another member now wins starts nothing more here, its
buffered requests go back, and once its requests in flight have ended its lease is
released with each host's pace (``ReadyHosts.paces``), which the next owner waits out
(``ReadyHosts.seed``). A bucket whose lease ran out instead (its owner was cut off or
died) makes its new owner rest each of its hosts one delay before the first start.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Sequence
from typing import Any

import structlog
from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster
from redis.exceptions import NoScriptError, RedisError, ResponseError

from netdisco.exceptions import NetdiscoError
from netdisco.frontiers.base import Codec, PaceBook, Queued, R
from netdisco.frontiers.redis.batching import by_shard
from netdisco.frontiers.redis.frontier import RedisFrontier
from netdisco.frontiers.redis.leases import Client, return_leases, text
from netdisco.frontiers.redis.options import RedisOptions
from netdisco.frontiers.redis.owners import BUCKETS, BucketKeys, BucketLeases, bucket_of
from netdisco.frontiers.redis.ownership import TRUSTED, Moves, Ownership, RedisMembers
from netdisco.frontiers.redis.replication import REPLICA_WAIT_MS, replicas_for
from netdisco.frontiers.redis.scripts import COUNTS_LUA, DONE_LUA, OWNED_ADD_LUA, OWNED_TAKE_LUA
from netdisco.frontiers.redis.windows import Windows

log = structlog.get_logger(__name__)

#: how often an engine says it is a member and settles its buckets (s)
OWNER_BEAT = 1.0
#: how long a member entry and a bucket lease last unless pushed on (ms): a dead engine's
#: hosts move this long after its last beat when nothing recovers it sooner
OWNER_TTL_MS = 3_000
#: the share of a bucket lease its last owner did not trust (``ownership.TRUSTED``), in s:
#: a request it checked just in time may reach the host that much later (a stalled
#: loop), so a bucket whose lease ran out rests each host this long beside the delay
UNTRUSTED = (1 - TRUSTED) * OWNER_TTL_MS / 1000
#: how long a count that says work remains is reused (s): see ``OwnedFrontier.counts``
COUNTS_REUSE = 1.0
#: buckets one take asks at most (one pipeline): enough for a batch, few enough that a
#: take with little to find costs little
TAKE_BUCKETS = 8

SCRIPTS = (OWNED_ADD_LUA, OWNED_TAKE_LUA, DONE_LUA, COUNTS_LUA)
NO_MOVES = Moves({}, frozenset(), frozenset(), frozenset())
#: how many times an add is sent until its replicas confirm it (``replication``)
ADD_TRIES = 5
#: a script, its keys and its arguments: one call of a pipeline (``OwnedFrontier._run``)
Call = tuple[str, list[Any], list[Any]]


class OwnedFrontier(RedisFrontier[R]):
    """A ``RedisFrontier`` whose hosts each have one owning engine (module docstring).

    Every engine sharing the crawl must use ``politeness=owner``. With ``replicas``,
    adds (and with ``wait=all`` takes) wait for them (``_run``).
    """

    def __init__(
        self,
        options: RedisOptions,
        name: str,
        codec: Codec[R],
        *,
        owner: str | None = None,
        redis: Client | None = None,
        buckets: int = BUCKETS,
    ) -> None:
        super().__init__(options, name, codec, owner=owner, redis=redis)
        self.buckets = buckets
        self._seen_mode = options.seen_mode(buckets)  # a seen set in each bucket
        self.shard_keys = self.bucket_keys = [
            BucketKeys.of(options.prefix, name, b) for b in range(buckets)
        ]
        self._by_queue = {k.queue: b for b, k in enumerate(self.bucket_keys)}
        self._by_sha = isinstance(self._redis, Redis)  # a Cluster's pipeline loads none
        where = (self._redis, options.prefix, name, self.owner)
        self.ownership = Ownership(BucketLeases(*where, ttl_ms=OWNER_TTL_MS), self.owner, buckets)
        self._members = RedisMembers(*where, ttl_ms=OWNER_TTL_MS)
        self._book: PaceBook | None = None
        self._delay = 0.0  # the crawl's download_delay: a cold bucket's hosts rest it once
        self._bucket_of_id: dict[str, int] = {}  # ids we hold (taken, not done)
        self._acking: dict[str, int] = {}  # ids done, their ack or requeue not sent yet
        self._hosts: defaultdict[int, set[str]] = defaultdict(set)  # hosts taken, by bucket
        self._cold: dict[int, tuple[float, set[str]]] = {}  # new bucket -> its rest, hosts rested
        self._full: set[int] = set()  # held buckets that may have requests queued
        self._windows = Windows(self._wake)
        self._unstarted: set[int] = set()  # id() of requests being given back unstarted
        self._add_wakes: Counter[int] = Counter()  # bucket -> wake-ups for adds to it so far
        self._counted: tuple[float, tuple[int, int, int]] | None = None  # see counts()
        self._counting = asyncio.Lock()
        self._turn = self.moves = 0  # the next take's first bucket; buckets moved (tests)
        self.unconfirmed = 0  # sends a node's replicas confirmed short of (``_run``)
        self._owner_task: asyncio.Task[None] | None = None
        self._settled = asyncio.Event()  # the first settle ran: we know what we own
        self._settling = asyncio.Lock()  # one settle at a time (the beat, or a caller)
        self._handing = asyncio.Lock()  # one hand-off of drained buckets at a time

    # -- what the crawl asks -------------------------------------------------------

    def set_politeness(self, delay: float, per_host: int) -> None:
        self._delay = delay

    def use_paces(self, book: PaceBook) -> None:
        """The crawl's paces: handed on with a bucket, seeded from the last owner's."""
        self._book = book

    def owns(self, host: str) -> bool:
        """Whether a request of ``host`` may start here now (its bucket's lease is ours,
        not leaving, and renewed within its TTL)."""
        return self.ownership.may_start(host)

    async def may_start(self, request: R) -> bool:
        if not (await super().may_start(request) and self.owns(request.host_key)):
            return False
        rid = self._ids.get(id(request), "")
        self._windows.left(rid, started=True)  # room for another of its bucket
        return True

    def may_start_now(self, request: R | None = None) -> bool:
        owned = request is None or self.owns(request.host_key)
        return owned and super().may_start_now()

    # -- opening and closing ------------------------------------------------------------

    async def open(self) -> None:
        await super().open()  # ``FrontierUnavailable``, with the URL, if Redis is not there
        if self._owner_task is None:
            await self._call(self._load_scripts)
            self._owner_task = asyncio.create_task(self._own_forever(), name="frontier-owner")
            with contextlib.suppress(TimeoutError):  # takes wait for the first settle
                await asyncio.wait_for(self._settled.wait(), 2.0)

    async def close(self, *, hand_back: bool = True) -> None:
        """Leave the members, hand our leases back, then each bucket with its hosts'
        paces (a graceful stop: the next owners start at once, and politely)."""
        if self._owner_task is not None:
            self._owner_task.cancel()
            await asyncio.wait([self._owner_task], timeout=2.0)
        returned = 0
        if hand_back and self._opened and not self._closed:
            try:
                await self.flush()  # acknowledged first: a finished page is not handed back
                await self._members.leave()
                returned = await return_leases(self._redis, self.shard_keys, self.owner)
                await self.ownership.give_up(self._pace_of)
            except RedisError as exc:  # their TTLs run out; the leases are swept
                log.warning("frontier_hand_off_failed", error=repr(exc))
        await super().close(hand_back=False)
        self.handed_back = returned

    # -- ownership ---------------------------------------------------------------------

    async def _own_forever(self) -> None:
        while not self._closed:
            try:
                await self.settle()
            except (RedisError, NetdiscoError) as exc:  # an outage: the local fence stops us
                log.debug("frontier_settle_failed", error=repr(exc))
            self._settled.set()
            await asyncio.sleep(OWNER_BEAT)

    async def settle(self) -> Moves:
        """Say we are a member, then move buckets to follow the members (``Ownership``).

        Not while our ZooKeeper fence is closed: ZooKeeper may be saying we are gone
        (its recovery drops us from the members and frees our buckets), and beating on
        would win the buckets back for an engine that may start nothing. Our member
        entry and bucket leases then run out, and the hosts move to the others."""
        if self.fence is not None and not self.fence.is_open:
            return NO_MOVES
        async with self._settling:
            return await self._settle()

    async def _settle(self) -> Moves:
        members = await self._members.beat()
        moves = await self.ownership.settle(members)
        self.round_trips += 2 + bool(moves.gained or moves.waiting)  # beat, renew, acquire
        now = time.monotonic()
        for bucket, got in moves.gained.items():
            self.moves += 1
            self._full.add(bucket)
            self._hosts.pop(bucket, None)
            # each host rests a delay before its first start here (the delay and the
            # last owner's untrusted share if its lease ran out): the pace handed on says
            # more for the hosts it names, and a host it does not name costs one delay
            self._cold[bucket] = (self._delay + (0 if got.released else UNTRUSTED), set())
            for host, rest in got.rests.items():
                if self._book is not None:
                    self._book.seed(host, rest)
        if moves.gained:
            log.info("frontier_buckets_gained", count=len(moves.gained), at=round(now, 3))
            self._wake()
        self._full -= moves.leaving | moves.lost
        if moves.leaving or moves.lost:
            await self._hand_back_buffer(moves.leaving | moves.lost)
        await self._hand_off_drained()
        await self._look_for_work()
        return moves

    async def _look_for_work(self) -> None:
        """Which of our buckets have requests queued, read anew: a wake-up lost in an
        outage (or in a pub/sub hiccup) costs at most one ``OWNER_BEAT``."""
        held = sorted(set(self.ownership.leases.tokens) - self.ownership.leaving - self._full)
        if not held:
            return
        async with self._redis.pipeline(transaction=False) as pipe:
            for bucket in held:
                pipe.zcard(self.bucket_keys[bucket].queue)
            queued = await pipe.execute()
        self.round_trips += 1
        found = {bucket for bucket, n in zip(held, queued, strict=True) if int(n)}
        if found:
            self._full |= found
            self._wake()

    async def counts(self) -> tuple[int, int, int]:
        """As ``RedisFrontier.counts`` (256 buckets read in one pipeline), but a count
        that says work remains is reused for ``COUNTS_REUSE`` s: idle workers ask often,
        and only the count that may end the crawl needs to be fresh."""
        async with self._counting:
            now = time.monotonic()
            if self._counted is not None and now - self._counted[0] < COUNTS_REUSE:
                return self._counted[1]
            found = await (self._counts_here() if self._by_sha else super().counts())
            queued, leased, _ = found
            self._counted = (time.monotonic(), found) if queued or leased else None
            return found

    async def _counts_here(self) -> tuple[int, int, int]:
        """``counts`` on one server: one script sums every bucket (``COUNTS_LUA``)."""
        if not self._opened:
            await self.open()
        await self.flush()  # our own finished requests do not count as leased
        prefix, bloom = self.options.prefix, "1" if self._bloom else "0"
        args = [prefix, self.name, self.buckets, self.epoch, bloom]

        async def count() -> list[Any]:
            async with self._redis.pipeline(transaction=False) as pipe:
                self._script(pipe, COUNTS_LUA, [], args)
                return await self._execute(pipe)

        (found,) = await self._call(count)
        if text(found[0]) == "LOST":
            raise self._lost(text(found[1]))
        queued, leased, seen = (int(n) for n in found)
        return queued, leased, seen

    async def _hand_off_drained(self) -> None:
        """Release each leaving bucket that has nothing in flight here any more, one
        caller at a time: two (a worker's ``done``, the beat) would both release a
        bucket, one with its hosts' paces and one with none, on two connections whose
        order Redis does not keep, and the next owner could get the empty one."""
        async with self._handing:
            if self._drained() & set(self._acking.values()):
                await self.flush()  # their acks first: the next owner must not take them
            for bucket in sorted(self._drained()):  # read again: the flush took a while
                self._cold.pop(bucket, None)
                self.moves += 1
                self.round_trips += 1
                await self.ownership.hand_off(bucket, self._pace_of(bucket))

    def _drained(self) -> frozenset[int]:
        return self.ownership.leaving - set(self._bucket_of_id.values())

    def _pace_of(self, bucket: int) -> dict[str, tuple[float, float]]:
        hosts = self._hosts.pop(bucket, set())
        return self._book.paces(hosts) if self._book is not None and hosts else {}

    async def _hand_back_buffer(self, buckets: set[int] | frozenset[int] | None = None) -> None:
        """Requests taken but not handed out, of ``buckets`` (all: None), go back."""
        mine = [
            (rid, raw)
            for rid, raw in self._buffer
            if buckets is None or self._bucket_of_id.get(rid) in buckets
        ]
        if not mine:
            return
        ids = {rid for rid, _ in mine}
        kept = [(rid, raw) for rid, raw in self._buffer if rid not in ids]
        self._buffer.clear()
        self._buffer.extend(kept)
        with contextlib.suppress(RedisError, NetdiscoError):  # else the lease sweep does
            await self._release(sorted(ids), requeue=True)

    # -- the Frontier protocol, by bucket ----------------------------------------------

    async def take(self) -> R | None:
        request = await super().take()
        if request is not None:
            self._taken(request)
        return request

    def _taken(self, request: R) -> None:
        """A request handed out: its host rests once after its bucket came here (``_cold``)."""
        rid = self._ids.get(id(request))
        bucket = self._bucket_of_id.get(rid or "")
        if bucket is None:
            return
        host = request.host_key
        self._hosts[bucket].add(host)
        cold = self._cold.get(bucket)
        if cold is not None and host not in cold[1]:
            cold[1].add(host)
            if self._book is not None and cold[0] > 0:
                self._book.seed(host, cold[0])

    async def done(self, request: R, *, requeue: bool = False) -> None:
        if requeue:  # given back unstarted (no room for its host here, say): ``Windows``
            self._unstarted.add(id(request))
        await super().done(request, requeue=requeue)
        if self.ownership.leaving:
            await self._hand_off_drained()

    def _bucket(self, host: str) -> int:
        return bucket_of(host, self.buckets)

    def _entry(self, request: R, body: bytes) -> list[str | bytes]:
        return [*super()._entry(request, body), request.host_key]

    async def _add_entries(self, rows: list[list[str | bytes]]) -> list[Any]:
        """One pipeline for a batch of adds, one script per bucket they touch."""
        groups: dict[int, list[int]] = defaultdict(list)
        for index, row in enumerate(rows):
            groups[self._bucket(str(row[4]))].append(index)
        plan = sorted(groups.items())
        calls: list[Call] = []
        for bucket, indexes in plan:
            k = self.bucket_keys[bucket]
            keys = [k.seen_store(self._bloom), k.seen_count, k.queue, k.payload, k.seq, k.epoch]
            args: list[Any] = [self._seen_mode, self.keys.added_channel, self.epoch]
            args.append(uuid.uuid4().hex[:8])
            args += [x for i in indexes for x in rows[i][:4]]
            calls.append((OWNED_ADD_LUA, keys, args))
        answers = await self._call(lambda: self._run(calls, replicated=True, tries=ADD_TRIES))
        out: list[Any] = [0] * len(rows)
        for (bucket, indexes), answer in zip(plan, answers, strict=True):
            for index, flag in zip(indexes, answer, strict=True):
                out[index] = flag
            if any(answer):  # ours: no need to wait for the wake-up
                self._work_in(bucket)
        return out

    async def _claim_all(self, requests: Sequence[Queued]) -> list[Any]:
        return await by_shard(
            requests,
            lambda r: self._bucket(r.host_key),
            lambda b, rs: self._claim_in(self.bucket_keys[b], rs),
        )

    async def _take_once(self) -> Any:
        """Requests of our buckets that may have some, ``TAKE_BUCKETS`` of them in one
        pipeline, the next ones while those were empty; else 1 (wait for a wake-up)
        while we own buckets with nothing queued, 0 when we own none or when every
        bucket with work has as many requests waiting here as it may (``Windows``)."""
        await self._hand_off_drained()
        tried: set[int] = set()
        while True:
            tokens = self.ownership.leases.tokens
            leaving = self.ownership.leaving
            ours = [b for b in self._full - tried if b in tokens and b not in leaving]
            mine = sorted(b for b in ours if self._windows.worth_a_take(b))
            if not mine:
                return 1 if tokens and not ours else 0
            start = self._turn % len(mine)
            asked = (mine[start:] + mine[:start])[:TAKE_BUCKETS]
            self._turn += len(asked)
            tried.update(asked)
            if found := await self._take_from(asked):
                return found

    async def _take_from(self, asked: list[int]) -> list[Any]:
        """One pipeline of takes, one from each bucket of ``asked``: what they leased."""
        tokens = self.ownership.leases.tokens
        counts = {b: n for b in asked if (n := self._windows.book(b))}  # as many as may wait
        plan = [(b, tokens[b], self.bucket_keys[b].take_token(uuid.uuid4().hex)) for b in counts]
        if not plan:  # other takes booked their room meanwhile
            return []
        adds = {bucket: self._add_wakes[bucket] for bucket in asked}  # see below
        calls: list[Call] = []
        for bucket, token, take in plan:
            k = self.bucket_keys[bucket]
            keys = [k.queue, k.leases, k.owner, k.owned(self.owner), k.payload, take]
            keys += [k.epoch, k.lease]
            args = [self.owner, self._ttl_ms, counts[bucket], self.epoch, token]
            calls.append((OWNED_TAKE_LUA, keys, args))
        replicated = self.options.wait == "all"  # a lease a failover undid is a duplicate
        try:
            answers = await self._call(lambda: self._run(calls, stale=True, replicated=replicated))
        except BaseException:
            for bucket, booked in counts.items():
                self._windows.taken(bucket, [], booked)
            raise
        found: list[Any] = []
        for (bucket, _, _), answer in zip(plan, answers, strict=True):
            rids: list[str] = []
            if isinstance(answer, ResponseError) and "STALE" in str(answer):
                self._windows.taken(bucket, [], counts[bucket])
                self._full.discard(bucket)  # not ours any more: the next settle sees it
                self.ownership.leases.tokens.pop(bucket, None)
                continue
            leased = isinstance(answer, list) and bool(answer)
            if leased:
                answer = self._not_held(answer)
                rids = [text(rid) for rid in answer[::2]]
                self._bucket_of_id.update(dict.fromkeys(rids, bucket))
                found += answer
            self._windows.taken(bucket, rids, counts[bucket])
            if not leased and self._add_wakes[bucket] == adds[bucket]:  # empty, and no add
                self._full.discard(bucket)  # came since we asked: the next wakes us (``_woken``)
        return found

    def _not_held(self, pairs: list[Any]) -> list[Any]:
        """The (id, request) pairs of a take but those we hold already: a lease of ours
        that a late heartbeat let expire, swept back to the queue and taken again while
        its first copy still waits or runs here (the lease is ours again either way)."""
        held = self._bucket_of_id.keys() | self._acking.keys()
        out: list[Any] = []
        for rid, raw in zip(pairs[::2], pairs[1::2], strict=True):
            if text(rid) not in held:
                out += [rid, raw]
        return out

    def _beat_keys(self) -> list[BucketKeys]:
        """The buckets we hold and those our requests are in: the owner of a bucket
        sweeps it (a bucket nobody holds is swept by its next owner), and 256 buckets a
        beat would make the beat slow enough, under load, to let our own leases expire."""
        buckets = self.ownership.held | {*self._bucket_of_id.values(), *self._acking.values()}
        return [self.bucket_keys[b] for b in sorted(buckets)]

    def _forget(self, request: R) -> str | None:
        unstarted = id(request) in self._unstarted
        self._unstarted.discard(id(request))
        rid = super()._forget(request)
        if rid is not None and (bucket := self._bucket_of_id.pop(rid, None)) is not None:
            self._acking[rid] = bucket
            self._windows.left(rid, started=not unstarted)  # if it never started
        return rid

    async def _release(self, rids: list[str], *, requeue: bool) -> None:
        """End our leases (put back with ``requeue``): one pipeline, a script per bucket."""
        groups: dict[int, list[str]] = defaultdict(list)
        for rid in rids:
            bucket = self._bucket_of_id.pop(rid, None)
            if bucket is not None:  # never handed out, if it waits still
                self._windows.left(rid, started=False)
            if bucket is None:
                bucket = self._acking.pop(rid, None)
            if bucket is None:
                bucket = await self._find_bucket(rid)
            if bucket is not None:
                groups[bucket].append(rid)
        if not groups:
            return
        calls: list[Call] = []
        for bucket, some in sorted(groups.items()):
            k = self.bucket_keys[bucket]
            keys = [k.leases, k.owner, k.owned(self.owner), k.payload, k.queue, k.epoch]
            calls.append((DONE_LUA, keys, [self.owner, "1" if requeue else "0", self.epoch, *some]))
        await self._call(lambda: self._run(calls))

    async def _find_bucket(self, rid: str) -> int | None:
        """The bucket of an id we no longer map (an orphan found by the heartbeat)."""
        async with self._redis.pipeline(transaction=False) as pipe:
            for k in self.bucket_keys:
                pipe.hexists(k.owner, rid)
            found = await pipe.execute()
        return next((b for b, there in enumerate(found) if there), None)

    def _script(self, pipe: Any, script: str, keys: list[Any], args: list[Any]) -> None:
        """Queue ``script`` in ``pipe``: by its SHA on one server (loaded by ``open``,
        and again if Redis forgot it), by its text on a Cluster."""
        if self._by_sha:
            pipe.evalsha(_sha(script), len(keys), *keys, *args)
        else:
            pipe.eval(script, len(keys), *keys, *args)

    async def _run(
        self, calls: list[Call], *, stale: bool = False, replicated: bool = False, tries: int = 1
    ) -> list[Any]:
        """``calls`` in one pipeline (one round trip, one a master on a Cluster), their
        answers (``_checked``, with ``stale``). With ``replicated`` and ``replicas``, the
        scripts of each node are followed by a ``WAIT`` on the same connection, and those
        of a node that fewer replicas confirmed are sent again, up to ``tries`` times
        (``replication``: an add must outlive a failover; its seen set makes a second
        send queue nothing twice). The first answer of each call is the one returned."""
        answers: list[Any] = [None] * len(calls)
        todo = list(range(len(calls)))
        for _ in range(tries):
            async with self._redis.pipeline(transaction=False) as pipe:
                for index in todo:
                    self._script(pipe, *calls[index])
                waits = self._waits(pipe, [calls[i][1][0] for i in todo]) if replicated else []
                got = await self._execute(pipe, stale=stale)
            for index, answer in zip(todo, got, strict=False):
                if answers[index] is None:
                    answers[index] = answer
            counts = got[len(todo) :]
            short = {node for (node, wanted), n in zip(waits, counts, strict=True) if n < wanted}
            self.unconfirmed += bool(short)
            todo = [i for i in todo if self._node_of(calls[i][1][0]) in short]
            if not todo:
                return answers
        self._confirmations.missed += 1  # ``add`` will not trust these writes
        log.warning("frontier_write_not_replicated", calls=len(todo), tries=tries)
        return answers

    def _waits(self, pipe: Any, keys: list[str]) -> list[tuple[str, int]]:
        """A ``WAIT`` for each node the writes to ``keys`` went to: (node, replicas)."""
        waits: dict[str, tuple[int, dict[str, Any]]] = {}
        for key in keys:
            wanted = replicas_for(self._redis, key, self.options.replicas)
            if wanted and (node := self._node_of(key)) not in waits:
                target = {}
                if isinstance(self._redis, RedisCluster):
                    target = {"target_nodes": self._redis.get_node_from_key(key)}
                waits[node] = (wanted, target)
        for wanted, target in waits.values():
            pipe.execute_command("WAIT", wanted, REPLICA_WAIT_MS, **target)
        return [(node, wanted) for node, (wanted, _) in waits.items()]

    def _node_of(self, key: str) -> str:
        """The node that serves ``key`` ("" on one server)."""
        if isinstance(self._redis, RedisCluster):
            return str(self._redis.get_node_from_key(key))
        return ""

    async def _execute(self, pipe: Any, *, stale: bool = False) -> list[Any]:
        """``pipe``'s answers (``_checked``); scripts Redis forgot (a restart) are loaded
        again, and the error sends ``_call`` round once more."""
        answers = list(await pipe.execute(raise_on_error=False))
        if any(isinstance(answer, NoScriptError) for answer in answers):
            await self._load_scripts()
        return _checked(answers, stale=stale)

    async def _load_scripts(self) -> None:
        if self._by_sha:
            for script in SCRIPTS:
                await self._redis.script_load(script)

    def _woken(self, data: Any) -> None:
        """An add published the queue it added to: that bucket may have work."""
        bucket = self._by_queue.get(text(data))
        for each in list(self.ownership.leases.tokens) if bucket is None else [bucket]:
            self._work_in(each)

    def _work_in(self, bucket: int) -> None:
        """Requests were added to ``bucket``: a take of it may find them."""
        self._add_wakes[bucket] += 1
        if bucket in self.ownership.leases.tokens:
            self._full.add(bucket)


def _checked(answers: list[Any], *, stale: bool = False) -> list[Any]:
    """The answers of a pipeline, its first error raised for ``_call`` (which turns
    ``LOST`` into the crawl's loss); with ``stale``, a refused bucket token stays an
    answer (that bucket is not ours any more)."""
    for answer in answers:
        if isinstance(answer, Exception) and not (stale and "STALE" in str(answer)):
            raise answer
    return answers


@functools.cache
def _sha(script: str) -> str:
    return hashlib.sha1(script.encode()).hexdigest()
