"""A frontier in Redis that several engines share: one crawl, many processes.

``settings.frontier = "redis://host:port/db?prefix=netdisco&lease_ttl=30"`` picks it
(``make_frontier``). Per spider (keys in ``netdisco.recovery.Keys``): a sorted set
of request ids by priority (FIFO within a priority), a hash of the requests as
JSON, the seen set, and the leases: every request taken is recorded with its
owner (the engine incarnation) and a deadline, and acknowledged by ``done``.
Each operation is one Lua script, so two engines never take the same request
and a crash between two commands cannot lose one.

Seen set, memory per URL (measured with Redis 7.0, ``MEMORY USAGE``):
``seen=exact`` keeps 16-byte fingerprints in a set, 64-72 bytes a URL (72 MB
per million); ``seen=bloom`` keeps a fixed bitmap of ``bloom_capacity`` x 1.8 bytes
at ``bloom_error=0.001`` (18 MB for 10 million URLs), with that false-positive
rate of pages never fetched. A queued request costs its JSON (~300 bytes) more.

Guarantees: a request leaves the frontier only when an engine acknowledges it;
a lost engine's leases go back to the queue (``netdisco.recovery``), so requests,
and so items, are at-least-once: a page may be fetched twice, never lost. Give
items a key downstream (e.g. the URL) where duplicates matter. Callbacks travel
by method name and are looked up on the spider; ``meta`` must be JSON-able.

Redis unreachable at the first operation: ``FrontierUnavailable``. Lost later:
every operation waits, retrying with backoff (logged once per outage), so the
crawl pauses and carries on when Redis is back.
"""

from __future__ import annotations

import asyncio
import base64
import json
import math
import time
import uuid
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import structlog
from redis import asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError

from netdisco.exceptions import ConfigError, FrontierUnavailable, RequestNotShareable
from netdisco.frontier import Frontier, MemoryFrontier
from netdisco.recovery import (
    DEFAULT_PREFIX,
    NOW_LUA,
    REQUEUE_LUA,
    Keys,
    LeaseRecovery,
    renew_leases,
    return_leases,
    spiders_key,
)
from netdisco.recovery import sweep_expired as sweep_leases
from netdisco.request import Request
from netdisco.settings import Settings
from netdisco.spider import Spider
from netdisco.zkconfig import ZooKeeperSettings

log = structlog.get_logger(__name__)
T = TypeVar("T")

#: KEYS seen, seen_count, queue, payload, seq; ARGV mode, channel, then per request:
#: seen key (fingerprint or Bloom offsets), dont_filter, priority, JSON -> 1/0 each.
#: Publishing what was added wakes the engines whose workers wait for work.
ADD_LUA = """
local out = {}
local added = 0
for i = 3, #ARGV, 4 do
  local new = false
  if ARGV[1] == 'bloom' then
    for off in string.gmatch(ARGV[i], '%d+') do
      if redis.call('SETBIT', KEYS[1], off, 1) == 0 then new = true end
    end
    if new then redis.call('INCR', KEYS[2]) end
  else
    new = redis.call('SADD', KEYS[1], ARGV[i]) == 1
  end
  if new or ARGV[i + 1] == '1' then
    local id = string.format('%015d', redis.call('INCR', KEYS[5]))
    redis.call('HSET', KEYS[4], id, ARGV[i + 3])
    redis.call('ZADD', KEYS[3], -tonumber(ARGV[i + 2]), id)
    out[#out + 1] = 1
    added = added + 1
  else
    out[#out + 1] = 0
  end
end
if added > 0 then redis.call('PUBLISH', ARGV[2], added) end
return out
"""
#: KEYS queue, leases, owner, owned, payload, take token; ARGV owner, ttl ms, count
#: -> id, JSON, id, JSON... (up to count), or when none is queued the number leased.
#: The token makes a retried take (its reply
#: was lost with the connection) get the requests it already leased, not orphan them.
TAKE_LUA = (
    NOW_LUA
    + """
local ids = {}
local prior = redis.call('GET', KEYS[6])
if prior then
  for _, id in ipairs(cjson.decode(prior)) do
    if redis.call('HGET', KEYS[3], id) == ARGV[1] then ids[#ids + 1] = id end
  end
else
  local popped = redis.call('ZPOPMIN', KEYS[1], tonumber(ARGV[3]))
  for i = 1, #popped, 2 do ids[#ids + 1] = popped[i] end
  if #ids == 0 then return redis.call('ZCARD', KEYS[2]) end
  redis.call('SET', KEYS[6], cjson.encode(ids), 'PX', ARGV[2])
end
local out = {}
for _, id in ipairs(ids) do
  redis.call('ZADD', KEYS[2], now + tonumber(ARGV[2]), id)
  redis.call('HSET', KEYS[3], id, ARGV[1])
  redis.call('SADD', KEYS[4], id)
  out[#out + 1] = id
  out[#out + 1] = redis.call('HGET', KEYS[5], id) or ''
end
return out
"""
)
#: KEYS leases, owner, owned, payload, queue; ARGV owner, requeue (1/0), ids...
#: A request requeued by recovery but finished by its old owner after all is
#: taken out of the queue again, saving a duplicate fetch.
DONE_LUA = (
    REQUEUE_LUA
    + """
for i = 3, #ARGV do
  local id = ARGV[i]
  if redis.call('HGET', KEYS[2], id) == ARGV[1] then
    redis.call('HDEL', KEYS[2], id)
    redis.call('ZREM', KEYS[1], id)
    redis.call('SREM', KEYS[3], id)
    if ARGV[2] == '1' then requeue(KEYS[5], KEYS[4], id) else redis.call('HDEL', KEYS[4], id) end
  elseif ARGV[2] == '0' and redis.call('ZREM', KEYS[5], id) == 1 then
    redis.call('HDEL', KEYS[4], id)
  end
end
return 1
"""
)
#: how long a worker waits for work that engines are still producing
WORK_WAIT = 0.25
_RETRY_FIRST = 0.05
_RETRY_MAX = 1.0
_OPTIONS = ("prefix", "lease_ttl", "seen", "bloom_capacity", "bloom_error", "prefetch")


@dataclass(frozen=True, kw_only=True)
class RedisOptions:
    """Where the frontier lives and how it behaves; parsed from the ``frontier`` URL."""

    url: str
    prefix: str = DEFAULT_PREFIX
    lease_ttl: float = 30.0
    seen: str = "exact"
    bloom_capacity: int = 10_000_000
    bloom_error: float = 0.001
    prefetch: int = 4

    @classmethod
    def from_url(cls, url: str) -> RedisOptions:
        """Our options come from the query string; the rest goes to redis-py."""
        parts = urlsplit(url)
        query = parse_qsl(parts.query, keep_blank_values=True)
        ours = {k: v for k, v in query if k in _OPTIONS}
        rest = urlencode([(k, v) for k, v in query if k not in _OPTIONS])
        try:
            options = cls(
                url=urlunsplit(parts._replace(query=rest)),
                prefix=ours.get("prefix", DEFAULT_PREFIX),
                lease_ttl=float(ours.get("lease_ttl", cls.lease_ttl)),
                seen=ours.get("seen", cls.seen),
                bloom_capacity=int(ours.get("bloom_capacity", cls.bloom_capacity)),
                bloom_error=float(ours.get("bloom_error", cls.bloom_error)),
                prefetch=int(ours.get("prefetch", cls.prefetch)),
            )
        except ValueError as exc:
            raise ConfigError("frontier", f"bad option in {redact(url)}: {exc}") from None
        options.check()
        return options

    def check(self) -> None:
        """Fail at start, naming the option, rather than half-way through a crawl."""
        problems = {
            "lease_ttl": None if self.lease_ttl >= 1 else "must be at least 1 second",
            "seen": None if self.seen in ("exact", "bloom") else "must be exact or bloom",
            "bloom_capacity": None if self.bloom_capacity > 0 else "must be positive",
            "bloom_error": None if 0 < self.bloom_error < 1 else "must be between 0 and 1",
            "prefix": None if self.prefix and "{" not in self.prefix else "must be non-empty",
            "prefetch": None if 1 <= self.prefetch <= 1000 else "must be from 1 to 1000",
        }
        for name, problem in problems.items():
            if problem is not None:
                raise ConfigError("frontier", f"option {name} {problem} ({redact(self.url)})")

    def bloom_size(self) -> tuple[int, int]:
        """``(bits, hashes)`` for the capacity and error rate (at most 2**32 bits)."""
        bits = math.ceil(-self.bloom_capacity * math.log(self.bloom_error) / math.log(2) ** 2)
        bits = min(bits, 2**32)
        return bits, max(1, round(bits / self.bloom_capacity * math.log(2)))


def redact(url: str) -> str:
    """The URL without its password, for messages and logs."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{parts.username or ''}:***@{host}"))


def bloom_offsets(fingerprint: bytes, bits: int, hashes: int) -> str:
    """Double hashing over the (already uniform) 16-byte fingerprint."""
    first = int.from_bytes(fingerprint[:8], "big")
    step = int.from_bytes(fingerprint[8:16], "big") | 1
    return " ".join(str((first + i * step) % bits) for i in range(hashes))


def _method_name(function: Callable[..., Any] | None, spider: Spider, url: str) -> str | None:
    if function is None:
        return None
    name = getattr(function, "__name__", "")
    if getattr(function, "__self__", None) is spider and getattr(spider, name, None) == function:
        return str(name)
    raise RequestNotShareable(
        f"callback {function!r} is not a method of spider {spider.name!r}; "
        "a shared frontier stores callbacks by method name",
        url=url,
    )


def _resolve(spider: Spider, name: str | None) -> Any:
    if name is None:
        return None
    method = getattr(spider, name, None)
    if not callable(method):
        raise RequestNotShareable(f"spider {spider.name!r} has no method {name!r}", url="")
    return method


#: Request fields stored as they are (JSON types); body, fingerprint and callbacks are converted.
_PLAIN = (
    "url",
    "method",
    "headers",
    "meta",
    "priority",
    "dont_filter",
    "proxy",
    "depth",
    "attempts",
)


def encode(request: Request, spider: Spider) -> str:
    """The request as JSON; callbacks by method name. ``RequestNotShareable`` if it cannot."""
    data = {name: getattr(request, name) for name in _PLAIN}
    data["body"] = None if request.body is None else base64.b64encode(request.body).decode()
    data["fingerprint"] = request.fingerprint.hex()
    data["callback"] = _method_name(request.callback, spider, request.url)
    data["errback"] = _method_name(request.errback, spider, request.url)
    try:
        return json.dumps(data, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise RequestNotShareable(f"meta is not JSON-able: {exc}", url=request.url) from None


def decode(raw: bytes | str, spider: Spider) -> Request:
    """The inverse of ``encode``, callbacks resolved on this process's spider."""
    data = json.loads(raw)
    body = data["body"]
    return Request(
        **{name: data[name] for name in _PLAIN},
        body=None if body is None else base64.b64decode(body),
        fingerprint=bytes.fromhex(data["fingerprint"]),
        callback=_resolve(spider, data["callback"]),
        errback=_resolve(spider, data["errback"]),
    )


class RedisFrontier:
    """The ``Frontier`` protocol over Redis, shared by every engine crawling ``spider``.

    ``owner`` names the leases: pass the engine's incarnation so that
    ``LeaseRecovery`` can return them when the engine's znode is lost.
    """

    def __init__(
        self,
        options: RedisOptions,
        spider: Spider,
        *,
        owner: str | None = None,
        redis: aioredis.Redis | None = None,
    ) -> None:
        self.options = options
        self.spider = spider
        self.owner = owner or uuid.uuid4().hex
        self.keys = Keys(options.prefix, spider.name)
        self.round_trips = 0
        self._redis = redis or aioredis.Redis.from_url(
            options.url, socket_connect_timeout=2.0, socket_timeout=10.0, protocol=2
        )  # RESP2: works with every Redis 5+ server, and pub/sub on its own connection
        self._add = self._redis.register_script(ADD_LUA)
        self._take = self._redis.register_script(TAKE_LUA)
        self._done = self._redis.register_script(DONE_LUA)
        self._bloom = options.bloom_size() if options.seen == "bloom" else None
        self._ttl_ms = int(options.lease_ttl * 1000)
        self._ids: dict[int, str] = {}  # id(request) -> Redis id, for requests we hold
        self._buffer: deque[tuple[str, bytes]] = deque()  # leased, not yet handed out
        self._acks: list[str] = []  # done, ack not sent yet
        self._unacked: set[str] = set()  # done, ack not confirmed yet
        self._flusher: asyncio.Task[None] | None = None
        self._work = asyncio.Event()  # set (and replaced) when any engine adds requests
        self._listener: asyncio.Task[None] | None = None
        self._suspects: set[str] = set()
        self._opened = False
        self._closed = False
        self._open_lock = asyncio.Lock()
        self._down_since: float | None = None
        self._heartbeat: asyncio.Task[None] | None = None

    # -- lifecycle -----------------------------------------------------------------

    async def open(self) -> None:
        """Check Redis answers (``FrontierUnavailable`` if not) and start the heartbeat."""
        async with self._open_lock:
            if self._opened:
                return
            try:
                await self._redis.ping()
                await self._redis.sadd(spiders_key(self.options.prefix), self.spider.name)
            except RedisError as exc:
                raise FrontierUnavailable(
                    f"cannot reach Redis at {redact(self.options.url)}: {exc}"
                ) from exc
            self._opened = True
            self._heartbeat = asyncio.create_task(self._beat_forever(), name="frontier-heartbeat")
            self._listener = asyncio.create_task(self._listen(), name="frontier-listener")
            log.info("frontier_opened", url=redact(self.options.url), owner=self.owner)

    async def close(self, *, hand_back: bool = True) -> int:
        """Stop the heartbeat, hand our leases back (graceful stop), disconnect."""
        if self._closed:
            return 0
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
                returned = await return_leases(self._redis, self.keys, self.owner)
            except RedisError as exc:  # the deadline sweep of the others returns them
                log.warning("frontier_hand_back_failed", error=repr(exc))
        self._ids.clear()
        self._buffer.clear()
        await self._redis.aclose()
        log.info("frontier_closed", owner=self.owner, handed_back=returned)
        return returned

    # -- the Frontier protocol ---------------------------------------------------------

    async def add(self, requests: Sequence[Request]) -> list[bool]:
        if not self._opened:
            await self.open()
        args: list[str | bytes] = [self.options.seen, self.keys.added_channel]
        sent: list[int] = []
        for index, request in enumerate(requests):
            try:
                body = encode(request, self.spider)
            except RequestNotShareable as exc:
                log.error("request_not_shareable", url=request.url, error=str(exc))
                continue
            args += [self._seen_key(request), "1" if request.dont_filter else "0"]
            args += [str(request.priority), body]
            sent.append(index)
        added = [False] * len(requests)
        if sent:
            keys = self.keys
            result = await self._call(
                lambda: self._add(
                    keys=[keys.seen, keys.seen_count, keys.queue, keys.payload, keys.seq],
                    args=args,
                )
            )
            for index, flag in zip(sent, result, strict=True):
                added[index] = bool(flag)
        return added

    async def take(self) -> Request | None:
        if not self._opened:
            await self.open()
        while True:
            if not self._buffer:
                found = await self._take_batch()
                if isinstance(found, int):
                    return None
                pairs = zip(found[::2], found[1::2], strict=True)
                self._buffer.extend((rid.decode(), raw) for rid, raw in pairs)
            rid, raw = self._buffer.popleft()
            try:
                request = decode(raw, self.spider)
            except (RequestNotShareable, ValueError, KeyError, TypeError) as exc:
                log.error("frontier_request_unreadable", id=rid, error=repr(exc))
                await self._release([rid], requeue=False)
                continue
            self._ids[id(request)] = rid
            return request

    async def done(self, request: Request, *, requeue: bool = False) -> None:
        """Requeues go at once; acks are sent in the background, batched.

        The worker does not wait for an ack (its children are already queued), so
        a page costs one round trip fewer; a crash before the ack only means the
        lease goes back and the page may be fetched again (at-least-once).
        """
        rid = self._ids.pop(id(request), None)
        if rid is None:
            return
        if requeue:
            await self._release([rid], requeue=True)
            return
        self._acks.append(rid)
        self._unacked.add(rid)
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.create_task(self._flush(), name="frontier-acks")

    async def counts(self) -> tuple[int, int, int]:
        if not self._opened:
            await self.open()
        await self.flush()  # our own finished requests do not count as leased

        async def read() -> list[Any]:
            async with self._redis.pipeline(transaction=False) as pipe:
                pipe.zcard(self.keys.queue)
                pipe.zcard(self.keys.leases)
                if self._bloom is None:
                    pipe.scard(self.keys.seen)
                else:
                    pipe.get(self.keys.seen_count)
                return await pipe.execute()

        queued, leased, seen = await self._call(read)
        return int(queued), int(leased), int(seen or 0)

    async def flush(self) -> None:
        """Wait until every ``done`` so far is acknowledged in Redis."""
        while self._flusher is not None and not self._flusher.done():
            await asyncio.shield(self._flusher)

    # -- internals ---------------------------------------------------------------------

    def _seen_key(self, request: Request) -> str | bytes:
        if self._bloom is None:
            return request.fingerprint
        return bloom_offsets(request.fingerprint, *self._bloom)

    async def _take_batch(self) -> Any:
        """Requests, or, when none is queued but some are leased (so more may come),
        the same after waiting up to ``WORK_WAIT`` for another engine to add some."""
        wake = self._work  # taken before asking, so no notice can slip in between
        found = await self._take_once()
        if isinstance(found, int) and found > 0:
            try:
                await asyncio.wait_for(wake.wait(), WORK_WAIT)
            except TimeoutError:
                return found
            found = await self._take_once()
        return found

    async def _take_once(self) -> Any:
        k = self.keys
        token = k.take_token(uuid.uuid4().hex)  # the same for every retry of this take
        keys = [k.queue, k.leases, k.owner, k.owned(self.owner), k.payload, token]
        args: list[str | int] = [self.owner, self._ttl_ms, self.options.prefetch]
        return await self._call(lambda: self._take(keys=keys, args=args))

    async def _release(self, rids: list[str], *, requeue: bool) -> None:
        k = self.keys
        keys = [k.leases, k.owner, k.owned(self.owner), k.payload, k.queue]
        args = [self.owner, "1" if requeue else "0", *rids]
        await self._call(lambda: self._done(keys=keys, args=args))

    async def _flush(self) -> None:
        while self._acks:
            batch, self._acks = self._acks, []
            try:
                await self._release(batch, requeue=False)
            except Exception:  # not acked: the orphan check returns them (a duplicate)
                log.exception("frontier_ack_failed", count=len(batch))
            self._unacked.difference_update(batch)

    async def _call(self, operation: Callable[[], Awaitable[T]]) -> T:
        """One round trip; while Redis is unreachable, wait and try again (logged once)."""
        delay = _RETRY_FIRST
        while True:
            try:
                result = await operation()
            except (RedisConnectionError, RedisTimeoutError) as exc:
                if self._down_since is None:
                    self._down_since = time.monotonic()
                    log.warning("frontier_unavailable_waiting", error=repr(exc), owner=self.owner)
                await asyncio.sleep(delay)
                delay = min(delay * 2, _RETRY_MAX)
                continue
            self.round_trips += 1
            if self._down_since is not None:
                down, self._down_since = time.monotonic() - self._down_since, None
                log.warning("frontier_available_again", seconds_down=round(down, 2))
            return result

    async def _listen(self) -> None:
        """Turn other engines' additions into a wake-up for our waiting workers.

        redis-py may turn our cancellation into a connection error, so the loops
        here stop on ``_closed`` rather than trusting ``CancelledError`` to arrive.
        """
        while not self._closed:
            try:
                async with self._redis.pubsub(ignore_subscribe_messages=True) as pubsub:
                    await pubsub.subscribe(self.keys.added_channel)
                    while not self._closed:
                        if await pubsub.get_message(timeout=0.5) is not None:
                            self._work.set()
                            self._work = asyncio.Event()
            except RedisError as exc:  # an outage: the operations log it and wait
                log.debug("frontier_listener_failed", error=repr(exc))
                await asyncio.sleep(_RETRY_MAX)

    async def _beat_forever(self) -> None:
        while not self._closed:
            await asyncio.sleep(self.options.lease_ttl / 3)
            try:
                await self.beat()
            except RedisError as exc:  # an outage: the next beat tries again
                log.debug("frontier_heartbeat_failed", error=repr(exc))

    async def beat(self) -> None:
        """Push our deadlines on, requeue orphans, sweep others' expired leases.

        An orphan is a lease Redis recorded for a take whose reply we never got
        (the connection broke): seen in two beats running, it goes back.
        """
        held = await renew_leases(self._redis, self.keys, self.owner, self._ttl_ms)
        held -= {*self._ids.values(), *self._unacked, *(rid for rid, _ in self._buffer)}
        orphans = held & self._suspects
        if orphans:
            log.warning("frontier_orphans_requeued", count=len(orphans))
            await self._release(sorted(orphans), requeue=True)
        self._suspects = held - self._suspects
        swept = await sweep_leases(self._redis, self.keys)
        if swept:
            log.warning("frontier_expired_leases_requeued", count=swept)


def make_frontier(settings: Settings, spider: Spider, *, owner: str | None = None) -> Frontier:
    """The frontier ``settings.frontier`` names: in memory, or Redis (shared)."""
    if settings.frontier.startswith("memory"):
        return MemoryFrontier()
    return RedisFrontier(RedisOptions.from_url(settings.frontier), spider, owner=owner)


def lease_recovery(frontier: str, zookeeper: ZooKeeperSettings, incarnation: str) -> LeaseRecovery:
    """The registry watcher an engine runs beside its Redis frontiers (one per engine)."""
    options = RedisOptions.from_url(frontier)
    return LeaseRecovery(zookeeper, options.url, prefix=options.prefix, incarnation=incarnation)
