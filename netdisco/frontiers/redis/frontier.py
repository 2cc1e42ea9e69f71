"""``RedisFrontier``: the ``Frontier`` protocol over Redis (see the package docstring)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import shlex
import time
import uuid
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import structlog
from redis.exceptions import RedisError, SlotNotCoveredError

from netdisco._tasks import wait_event
from netdisco.exceptions import (
    ConfigError,
    CrawlLost,
    FrontierUnavailable,
    NetdiscoError,
    RequestNotShareable,
)
from netdisco.frontiers.base import Codec, Frontier, Queued, R
from netdisco.frontiers.redis.batching import GroupCommit
from netdisco.frontiers.redis.epochs import join_epoch, read_counts
from netdisco.frontiers.redis.leases import Client, Keys, renew_leases, return_leases, spiders_key
from netdisco.frontiers.redis.leases import sweep_expired as sweep_leases
from netdisco.frontiers.redis.options import RedisOptions, bloom_hashes, connect, redact, refusal
from netdisco.frontiers.redis.replication import Confirmations
from netdisco.frontiers.redis.scripts import ADD_LUA, CLAIM_LUA, DONE_LUA, LOST, TAKE_LUA

if TYPE_CHECKING:
    from netdisco.frontiers.failed import FailedPage, FailedRecord
    from netdisco.frontiers.redis.failed import RedisFailed
    from netdisco.frontiers.redis.pages import RedisPages

log = structlog.get_logger(__name__)
T = TypeVar("T")

#: fingerprints remembered locally as seen (about 90 bytes each) before starting over
KNOWN_MAX = 1_000_000
#: how long a worker waits for work that engines are still producing
WORK_WAIT = 0.25
_RETRY_FIRST, _RETRY_MAX = 0.05, 1.0  # seconds between tries while Redis cannot answer


class RedisFrontier(Frontier[R]):
    """A ``Frontier`` over Redis, shared by every engine crawling ``name``: connected,
    with a page store (``pages``); its counters are not stored (the ``finished`` default).

    ``codec`` turns requests into JSON and back (callbacks by name, say).
    ``owner`` names the leases: pass the engine's incarnation so that
    ``LeaseRecovery`` can return them when the engine's znode is lost.
    """

    def __init__(
        self,
        options: RedisOptions,
        name: str,
        codec: Codec[R],
        *,
        owner: str | None = None,
        redis: Client | None = None,
    ) -> None:
        self.options = options
        self.name = name
        self.codec = codec
        self.owner = owner or uuid.uuid4().hex
        self.keys = Keys(options.prefix, name)
        self.shard_keys: Sequence[Keys] = [self.keys]  # every hash tag the crawl uses
        self.round_trips = 0
        self._redis = redis or connect(options.url, socket_connect_timeout=2.0, socket_timeout=10.0)
        scripts = (ADD_LUA, CLAIM_LUA, TAKE_LUA, DONE_LUA)
        self._add, self._claim, self._take, self._done = map(self._redis.register_script, scripts)
        self._bloom, self._seen_mode = options.seen == "bloom", options.seen_mode()
        self._ttl_ms = int(options.lease_ttl * 1000)
        self._ids: dict[int, str] = {}  # id(request) -> Redis id, for requests we hold
        self._buffer: deque[tuple[str, bytes]] = deque()  # leased, not yet handed out
        self._epoch, self._stale = 0, set[int | str]()  # the fence's epoch; taken before it
        self._acks: list[str] = []  # done, ack not sent yet
        self._unacked: set[str] = set()  # done, ack not confirmed yet
        self._flusher: asyncio.Task[None] | None = None
        self._work = asyncio.Event()  # set (and replaced) when any engine adds requests
        self._listener: asyncio.Task[None] | None = None
        self._listening = asyncio.Event()  # subscribed: no wake-up is missed from here
        self._suspects: set[str] = set()
        self._known: set[bytes] = set()  # fingerprints certainly in the seen set
        self._confirmations = Confirmations()  # writes no replica confirmed: see add()
        self._adds: GroupCommit[list[str | bytes], Any] = GroupCommit(self._add_entries)
        self._opened = self._closed = False
        self._open_lock = asyncio.Lock()
        self._down_since: float | None = None
        self._heartbeat: asyncio.Task[None] | None = None
        self.epoch, self.handed_back = "", 0  # the crawl we joined (open()); returned by close()
        self._pages: RedisPages | None = None

    async def open(self) -> None:
        """Check Redis answers (``FrontierUnavailable`` if not) and start the heartbeat."""
        async with self._open_lock:
            if self._opened:
                return
            try:
                await self._redis.ping()
                await self._redis.sadd(spiders_key(self.options.prefix), self.name)
                await self._join()
            except RedisError as exc:
                raise FrontierUnavailable(
                    f"cannot reach Redis at {redact(self.options.url)}: {exc}"
                ) from exc
            self._opened = True
            self._heartbeat = asyncio.create_task(self._beat_forever(), name="frontier-heartbeat")
            self._listener = asyncio.create_task(self._listen(), name="frontier-listener")
            with contextlib.suppress(TimeoutError):  # without it, takes poll: slower, not wrong
                await asyncio.wait_for(self._listening.wait(), 2.0)
            url = redact(self.options.url)
            log.info("frontier_opened", url=url, owner=self.owner, epoch=self.epoch)

    async def _join(self) -> None:
        """The crawl's epoch (``epochs``): every script checks it, so the engines that
        joined a crawl Redis lost fail instead of reading an empty queue as the end."""
        self.epoch, lost = await join_epoch(self._redis, self.shard_keys)
        if lost is not None:
            raise self._lost(lost)
        other = [k.seen_store(not self._bloom) for k in self.shard_keys]
        async with self._redis.pipeline(transaction=False) as pipe:
            for key in other:
                pipe.exists(key)
            if any(await pipe.execute()):  # its seen URLs would be quietly forgotten
                kept = "exact" if self._bloom else "bloom"
                raise ConfigError(
                    "frontier",
                    f"the crawl of {self.name!r} keeps its seen URLs with seen={kept} (or in "
                    "the fixed Bloom filter of an earlier netdisco), not "
                    f"seen={self.options.seen}: use seen={kept}, or " + self.start_over(),
                )

    def _lost(self, found: str) -> CrawlLost:
        what = "no crawl" if found in ("false", "None") else f"another crawl (epoch {found})"
        return CrawlLost(
            f"Redis at {redact(self.options.url)} lost the crawl of spider {self.name!r}: it "
            f"holds {what} instead of epoch {self.epoch} (restarted without persistence, "
            "FLUSHALL or failover to an empty replica); its queue, leases and seen set are gone"
        )

    def start_over(self) -> str:
        """A new run (``recrawl``, ``age``), another prefix, or the crawl's keys deleted:
        the exact ``redis-cli`` line for a ``redis://`` server (the password hidden)."""
        options, name = self.options, self.name
        pattern = shlex.quote(f"{options.prefix}:{{{name}[}}#]*")  # its keys and buckets'')
        ways = (
            "set recrawl or age for a new run, or crawl from scratch under another "
            f"prefix (?prefix=NEW in the frontier URL; this one is {options.prefix!r}), or "
        )
        if not options.url.startswith(("redis://", "rediss://")):
            return ways + f"delete the keys matching {pattern}"
        server = shlex.quote(redact(options.url).partition("?")[0])
        return ways + (
            f"delete its keys: redis-cli -u {server} --scan --pattern {pattern} "
            f"| xargs -r redis-cli -u {server} del"
        )

    def pages(self) -> RedisPages:
        """The crawl's pages in a hash beside its keys, on this frontier's connection."""
        if self._pages is None:
            from netdisco.frontiers.redis.pages import RedisPages

            self._pages = RedisPages(self)
        return self._pages

    @functools.cached_property
    def failed_store(self) -> RedisFailed:
        """The crawl's failed requests (every engine's), beside its queue."""
        from netdisco.frontiers.redis.failed import RedisFailed

        return RedisFailed(self._redis, self.keys, self.codec)

    async def keep_failed(self, request: R, record: FailedRecord, keep: int) -> int:
        return await self._on_failed(self.failed_store.keep(request, record, keep))

    async def failed(self, reason: str | None, offset: int, limit: int) -> FailedPage:
        return await self._on_failed(self.failed_store.page(reason, offset, limit))

    async def take_failed(
        self, reason: str | None = None, ids: Sequence[str] | None = None
    ) -> list[R]:
        return await self._on_failed(self.failed_store.take(reason, ids))

    async def _on_failed(self, call: Awaitable[T]) -> T:
        """A failed store call; outside the crawl (not open yet, or closed) on a
        connection closed after it."""
        try:
            return await call
        finally:
            if self._closed or not self._opened:
                await self._redis.aclose()

    async def close(self, *, hand_back: bool = True) -> None:
        """Stop the heartbeat, hand our leases back (graceful stop: ``handed_back`` says
        how many), disconnect."""
        if self._closed:
            return
        self._closed = True
        tasks = [task for task in (self._heartbeat, self._listener) if task is not None]
        for task in tasks:
            task.cancel()
        if tasks:  # see _listen: they end on _closed even if a cancellation is lost
            await asyncio.wait(tasks, timeout=2.0)
        if self._flusher is not None:
            await asyncio.wait([self._flusher], timeout=5.0)
        returned = 0
        if hand_back and self._opened:
            try:
                returned = await return_leases(self._redis, self.shard_keys, self.owner)
            except RedisError as exc:  # the deadline sweep of the others returns them
                log.warning("frontier_hand_back_failed", error=repr(exc))
        self._ids.clear()
        self._buffer.clear()
        await self._redis.aclose()
        self.handed_back = returned
        log.info("frontier_closed", owner=self.owner, handed_back=returned)

    # -- the Frontier protocol ---------------------------------------------------------

    async def add(self, requests: Sequence[R]) -> list[bool]:
        if not self._opened:
            await self.open()
        rows: list[list[str | bytes]] = []
        sent: list[int] = []
        for index, request in enumerate(requests):
            if request.fingerprint in self._known and not request.dont_filter:
                continue  # seen for sure: most links on a page are, so they stay here
            try:
                body = self.codec.pack(request)
            except RequestNotShareable as exc:
                log.error("request_not_shareable", url=request.url, error=str(exc))
                continue
            rows.append(self._entry(request, body))
            sent.append(index)
        added = [False] * len(requests)
        if sent:
            missed, result = self._confirmations.missed, await self._adds(rows)
            for index, flag in zip(sent, result, strict=True):
                added[index] = bool(flag)
            if self._confirmations.missed == missed:  # else a failover may undo the add,
                self._remember(requests[index].fingerprint for index in sent)  # so re-send
        return added

    def _entry(self, request: R, body: bytes) -> list[str | bytes]:
        """What ``add`` sends of one request."""
        flag = "1" if request.dont_filter else "0"
        return [self._seen_key(request), flag, str(request.priority), body]

    async def _add_entries(self, rows: list[list[str | bytes]]) -> list[Any]:
        """One round trip for the ``_entry`` rows of one or more adds (``GroupCommit``)."""
        entries = [field for row in rows for field in row]
        k = self.keys
        keys = [k.seen_store(self._bloom), k.seen_count, k.queue, k.payload, k.seq, k.epoch]
        nonce = uuid.uuid4().hex[:8]  # makes this call's ids unique
        args = [self._seen_mode, k.added_channel, self.epoch, nonce, *entries]
        return list(await self._call(lambda: self._add(keys=keys, args=args)))

    async def claim(self, requests: Sequence[Queued]) -> list[bool]:
        """Mark fingerprints seen without queueing (redirect targets); say which were new."""
        if not self._opened:
            await self.open()
        result = await self._claim_all(requests)
        self._remember(request.fingerprint for request in requests)
        return [bool(flag) for flag in result]

    async def _claim_all(self, requests: Sequence[Queued]) -> list[Any]:
        return await self._claim_in(self.keys, requests)

    async def _claim_in(self, k: Keys, requests: Sequence[Queued]) -> list[Any]:
        args = [self._seen_mode, *(self._seen_key(request) for request in requests)]
        keys = [k.seen_store(self._bloom), k.seen_count]
        return list(await self._call(lambda: self._claim(keys=keys, args=args)))

    def _remember(self, fingerprints: Iterable[bytes]) -> None:
        """Fingerprints Redis now holds; bounded, and forgotten after an outage."""
        if len(self._known) > KNOWN_MAX:
            self._known.clear()
        self._known.update(fp for fp in fingerprints if fp)

    async def take(self) -> R | None:
        if not self._opened:
            await self.open()
        await self._through_fence()
        while True:
            if not self._buffer:
                found = await self._take_batch()
                if isinstance(found, int):
                    return None
                pairs = zip(found[::2], found[1::2], strict=True)
                self._buffer.extend((rid.decode(), raw) for rid, raw in pairs)
            rid, raw = self._buffer.popleft()
            try:
                request = self.codec.decode(raw)
            except (RequestNotShareable, ValueError, KeyError, TypeError) as exc:
                log.error("frontier_request_unreadable", id=rid, error=repr(exc))
                await self._release([rid], requeue=False)
                continue
            self._ids[id(request)] = rid
            if rid in self._stale:
                self._stale.discard(rid)
                self._stale.add(id(request))
            return request

    async def may_start(self, request: R) -> bool:
        await self._through_fence()
        return id(request) not in self._stale

    def may_start_now(self, request: R | None = None) -> bool:
        fence = self.fence
        return fence is None or (fence.is_open and fence.epoch == self._epoch)

    async def _through_fence(self) -> None:
        """Wait while the fence is closed; once its epoch moved on, every lease we hold
        is stale (``netdisco._fence``)."""
        if self.fence is None:
            return
        epoch = await self.fence.passage()
        if epoch != self._epoch:
            self._epoch = epoch
            self._stale.update(self._ids)
            self._stale.update(rid for rid, _ in self._buffer)
            log.warning(
                "frontier_leases_fenced",
                owner=self.owner,
                epoch=epoch,
                held=len(self._ids),
                buffered=len(self._buffer),
            )

    def _forget(self, request: R) -> str | None:
        """The Redis id of a request we held, no longer held."""
        self._stale.discard(id(request))
        return self._ids.pop(id(request), None)

    async def done(self, request: R, *, requeue: bool = False) -> None:
        """Requeues go at once; acks are sent in the background, batched.

        The worker does not wait for an ack (its children are already queued), so
        a page costs one round trip fewer; a crash before the ack only means the
        lease goes back and the page may be fetched again (at-least-once).
        """
        rid = self._forget(request)
        if rid is None:
            return
        if requeue:
            await self._release([rid], requeue=True)
            return
        self._acks.append(rid)
        self._unacked.add(rid)
        self._start_flusher()

    def _start_flusher(self) -> None:
        """Send what waits (``_flush``) in the background, unless that runs already."""
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.create_task(self._flush(), name="frontier-acks")

    async def counts(self) -> tuple[int, int, int]:
        if not self._opened:
            await self.open()
        await self.flush()  # our own finished requests do not count as leased

        bloom = self._bloom
        found = await self._call(lambda: read_counts(self._redis, self.shard_keys, bloom))
        epochs, queued, leased, seen = found
        for epoch in epochs:
            if epoch != self.epoch:
                raise self._lost(epoch)
        return queued, leased, seen

    async def flush(self) -> None:
        """Wait until every ``done`` so far is acknowledged in Redis."""
        while self._flusher is not None and not self._flusher.done():
            await asyncio.shield(self._flusher)

    # -- internals ---------------------------------------------------------------------

    def _seen_key(self, request: Queued) -> str | bytes:
        return bloom_hashes(request.fingerprint) if self._bloom else request.fingerprint

    async def _take_batch(self) -> Any:
        """Requests, or, when none is queued but some are leased (so more may come),
        the same after waiting up to ``WORK_WAIT`` for another engine to add some."""
        wake = self._work  # taken before asking, so no notice can slip in between
        found = await self._take_once()
        if isinstance(found, int) and found > 0:
            if not await wait_event(wake, WORK_WAIT):
                return found
            found = await self._take_once()
        return found

    async def _take_once(self) -> Any:
        k = self.keys
        token = k.take_token(uuid.uuid4().hex)  # the same for every retry of this take
        keys = [k.queue, k.leases, k.owner, k.owned(self.owner), k.payload, token, k.epoch]
        args: list[str | int] = [self.owner, self._ttl_ms, self.options.prefetch, self.epoch]
        return await self._call(lambda: self._take(keys=keys, args=args))

    async def _release(self, rids: list[str], *, requeue: bool) -> None:
        k = self.keys
        keys = [k.leases, k.owner, k.owned(self.owner), k.payload, k.queue, k.epoch]
        args = [self.owner, "1" if requeue else "0", self.epoch, *rids]
        await self._call(lambda: self._done(keys=keys, args=args))

    async def _flush(self) -> None:
        while self._acks:
            batch, self._acks = self._acks, []
            try:
                await self._release(batch, requeue=False)
            except CrawlLost as exc:  # the next take or count reports it, once
                log.debug("frontier_ack_failed", count=len(batch), error=str(exc))
            except Exception:  # not acked: the orphan check returns them (a duplicate)
                log.exception("frontier_ack_failed", count=len(batch))
            self._unacked.difference_update(batch)

    async def _call(self, operation: Callable[[], Awaitable[T]]) -> T:
        """One round trip; while Redis is unreachable, wait and try again (logged once).

        ``CrawlLost`` when a script finds that Redis no longer holds our crawl, and
        ``FrontierFailed`` when Redis refuses (out of memory, no permission): the crawl
        must end, not count the page as failed and acknowledge it without its links.
        """
        delay = _RETRY_FIRST
        task = asyncio.current_task()
        cancels = 0 if task is None else task.cancelling()
        while True:
            try:
                result = await operation()
            except (RedisError, SlotNotCoveredError) as exc:
                if task is not None and task.cancelling():
                    # our cancellation came back as a Redis error (asyncio.timeout on
                    # Python 3.11 can turn one into a TimeoutError): a retry would swallow it
                    raise asyncio.CancelledError from exc
                if str(exc).startswith(LOST):  # "NETDISCO_LOST <epoch found> [script: ...]"
                    raise self._lost([*str(exc).split(), "?"][1]) from None
                if (failure := refusal(exc, self.options.url)) is not None:
                    raise failure from exc
                await self._wait_out(exc, delay)
                delay = min(delay * 2, _RETRY_MAX)
            else:
                if task is not None and task.cancelling() > cancels:
                    # cancelled during the call, and redis-py retried the TimeoutError
                    # it became (above) to an answer: the cancellation would be lost
                    raise asyncio.CancelledError
                return self._answered(result)

    async def _wait_out(self, exc: Exception, delay: float) -> None:
        """Redis cannot answer now: say so once per outage, and wait ``delay``."""
        if self._down_since is None:
            self._down_since = time.monotonic()
            log.warning("frontier_unavailable_waiting", error=repr(exc), owner=self.owner)
        await asyncio.sleep(delay)

    def _answered(self, result: T) -> T:
        self.round_trips += 1
        if self._down_since is not None:
            self._known.clear()  # Redis may have lost its last writes (AOF everysec)
            down, self._down_since = time.monotonic() - self._down_since, None
            log.warning("frontier_available_again", seconds_down=round(down, 2))
            # the notices of the outage are lost, and the listener's stream may stall for
            # its TCP retransmission backoff (seconds): others woken at once would take
            # every turn meanwhile. Subscribe anew and ask again now.
            self._listening.clear()
            self._wake()
        return result

    def _wake(self) -> None:
        """Wake every waiting take: there may be work for us."""
        self._work.set()
        self._work = asyncio.Event()

    async def _listen(self) -> None:
        """Turn other engines' additions into a wake-up for our waiting workers.

        redis-py may turn our cancellation into a connection error, so the loops
        here stop on ``_closed`` rather than trusting ``CancelledError`` to arrive.
        """
        while not self._closed:
            try:
                async with self._redis.pubsub(ignore_subscribe_messages=True) as pubsub:
                    await pubsub.subscribe(self.keys.added_channel)
                    self._listening.set()
                    self._wake()  # what was added while we subscribed
                    while not self._closed and self._listening.is_set():  # see _answered
                        message = await pubsub.get_message(timeout=0.5)
                        if message is not None:
                            self._woken(message["data"])
                            self._wake()
                if not self._closed:  # an outage ended (see _answered)
                    await self._drop_idle_connections()
            except (RedisError, OSError) as exc:  # an outage: the operations log it and wait
                log.debug("frontier_listener_failed", error=repr(exc))
                await asyncio.sleep(_RETRY_MAX)

    async def _drop_idle_connections(self) -> None:
        """Connections opened before an outage may still be stalled by TCP's backoff, and a
        subscription sends without reading: one sent on such a connection would never be
        heard. Idle ones reconnect on their next use instead (a cluster's nodes keep their
        own pools: there, the stalled ones time out first)."""
        pool = getattr(self._redis, "connection_pool", None)
        if pool is not None:
            await pool.disconnect(inuse_connections=False)

    def _woken(self, data: Any) -> None:
        """A notice of work came (``data``: what the script published)."""

    async def _beat_forever(self) -> None:
        while not self._closed:
            await asyncio.sleep(self.options.lease_ttl / 3)
            try:
                await self.beat()
            except (RedisError, NetdiscoError) as exc:  # an outage: the next beat tries again
                log.debug("frontier_heartbeat_failed", error=repr(exc))

    def _beat_keys(self) -> Sequence[Keys]:
        """The hash tags a heartbeat renews and sweeps: every one."""
        return self.shard_keys

    async def beat(self) -> None:
        """Push our deadlines on, requeue orphans, sweep others' expired leases.

        An orphan is a lease Redis recorded for a take whose reply we never got
        (the connection broke): seen in two beats running, it goes back.
        """
        keys = self._beat_keys()
        held = await renew_leases(self._redis, keys, self.owner, self._ttl_ms)
        held -= {*self._ids.values(), *self._unacked, *(rid for rid, _ in self._buffer)}
        orphans = held & self._suspects
        if orphans:
            log.warning("frontier_orphans_requeued", count=len(orphans))
            await self._release(sorted(orphans), requeue=True)
        self._suspects = held - self._suspects
        swept = await sweep_leases(self._redis, keys)
        if swept:
            log.warning("frontier_expired_leases_requeued", count=swept)
