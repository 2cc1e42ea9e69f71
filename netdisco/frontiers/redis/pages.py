"""The page store of a shared crawl (re-crawls), and the run every engine of it agrees on.

Two keys under the crawl's hash tag, named by ``PageKeys`` (the frontier's ``Keys``
builds every name): ``pages``, a hash of fingerprint -> page record (what the crawl's
``recrawl`` module stored: validators, when fetched, the links), which outlives runs;
and ``run``, the id of the crawl's current run. A new run (a scheduled tick, whose id
every engine derives from the tick) empties the seen set once, whichever engine
begins it first (with owned hosts, the seen set of every bucket: one pipeline right
after the run is marked begun, so a link another engine adds in between may be queued
twice, never lost); the pages stay. Everything goes through the frontier's connection
and its retries, so an outage pauses the crawl as it does for the queue.
"""

from __future__ import annotations

from typing import Any

from netdisco.frontiers.redis.frontier import RedisFrontier
from netdisco.frontiers.redis.leases import Keys

#: KEYS run; ARGV run -> 1 when this call began the run, 0 if it had begun
BEGIN_RUN_LUA = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[1])
return 1
"""


class PageKeys:
    """The keys of re-crawls, named by the frontier's own ``Keys`` (whatever its class), so
    they share its prefix and hash tag however those are built."""

    def __init__(self, keys: Keys) -> None:
        self._keys = keys

    @property
    def pages(self) -> str:
        """Hash: fingerprint -> page record; kept across runs."""
        return self._keys._key("pages")

    @property
    def run(self) -> str:
        """String: the id of the crawl's current run."""
        return self._keys._key("run")


class RedisPages:
    """``PageStore`` over the Redis frontier ``frontier`` (its client and its retries)."""

    def __init__(self, frontier: RedisFrontier[Any]) -> None:
        self.frontier = frontier
        self.keys = PageKeys(frontier.keys)
        self._redis = frontier._redis  # one client per crawl, of whatever kind it is
        self._begin = self._redis.register_script(BEGIN_RUN_LUA)

    async def get_page(self, fingerprint: bytes) -> bytes | None:
        raw = await self.frontier._call(lambda: self._redis.hget(self.keys.pages, fingerprint))
        return None if raw is None else raw if isinstance(raw, bytes) else raw.encode()

    async def put_page(self, fingerprint: bytes, record: bytes) -> None:
        await self.frontier._call(lambda: self._redis.hset(self.keys.pages, fingerprint, record))

    async def begin_run(self, run: str) -> bool:
        frontier = self.frontier
        began = await frontier._call(lambda: self._begin(keys=[self.keys.run], args=[run]))
        if began:  # the seen set of each hash tag (the buckets', with owned hosts)
            bloom = frontier._bloom
            seen = [x for k in frontier.shard_keys for x in (k.seen_store(bloom), k.seen_count)]
            await frontier._call(lambda: _delete(self._redis, seen))
        frontier._known.clear()  # fingerprints of the last run are no longer seen
        return bool(began)


async def _delete(redis: Any, keys: list[str]) -> None:
    """``keys`` deleted, one command each in one pipeline (they live in many slots)."""
    async with redis.pipeline(transaction=False) as pipe:
        for key in keys:
            pipe.delete(key)
        await pipe.execute()
