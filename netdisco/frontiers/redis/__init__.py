"""A frontier in Redis that several engines share: one crawl, many processes.

``settings.frontier = "redis://host:port/db?prefix=netdisco&lease_ttl=30"`` picks it
(``netdisco.frontiers.open_frontier``), or ``redis+cluster://host:port,host:port/0`` for a
Redis Cluster (each bucket of hosts under its own hash tag: ``owned``); the query
options are in
``options``. Per spider (keys in
``netdisco.frontiers.redis.leases.Keys``): a sorted set of request ids by priority (FIFO within
a priority), a hash of the requests as JSON (the crawl's codec), the seen set, and the
leases: every request taken is recorded with its owner (the engine incarnation)
and a deadline, and acknowledged by ``done``. Each operation is one Lua script
(``scripts``), so two engines never take the same request.

By default each host is owned by one engine at a time (``netdisco.frontiers.redis.owned``):
its requests wait in one of 256 buckets, each a set of the keys above under its own
hash tag, and the engine that owns a bucket takes its requests and keeps its hosts'
politeness in memory, as a standalone crawl does; ``politeness=engine`` keeps the
single queue above, each engine polite alone.

Round trips: a take leases up to ``prefetch`` requests at once, acks are sent in
the background in batches, an ``add`` is one script per batch of links, and a
worker that finds the queue empty while others still hold leases waits for a
pub/sub notice of new work instead of polling. Measured: about 1.7 round trips
a page (``bench/redis_bench.py``).

Seen set, memory per URL (measured with Redis 7.0, ``MEMORY USAGE``):
``seen=exact`` keeps 16-byte fingerprints in a set, 64-72 bytes a URL (72 MB per
million); ``seen=bloom`` keeps a Bloom filter that grows with the crawl: stages of
``bloom_capacity``, twice, four times as many URLs, each about 2 bytes a URL at
``bloom_error=0.001``, with that false-positive rate of pages never fetched (about
3.6 bytes a URL at 10 million, from a first stage of 1 million).

Guarantees: a request leaves the frontier only when an engine acknowledges it;
a lost engine's leases go back to the queue (``netdisco.frontiers.redis.recovery``), so requests,
and so items, are at-least-once: a page may be fetched twice, never lost. Give
items a key downstream (e.g. the URL) where duplicates matter.

Redis unreachable at the first operation: ``FrontierUnavailable``. Lost later:
every operation waits, retrying with backoff (logged once per outage), so the
crawl pauses and carries on when Redis is back.
"""

from netdisco.frontiers.redis.frontier import WORK_WAIT, RedisFrontier
from netdisco.frontiers.redis.options import RedisOptions, bloom_hashes, redact
from netdisco.frontiers.redis.scripts import ADD_LUA, DONE_LUA, TAKE_LUA

__all__ = [
    "ADD_LUA",
    "DONE_LUA",
    "TAKE_LUA",
    "WORK_WAIT",
    "RedisFrontier",
    "RedisOptions",
    "bloom_hashes",
    "redact",
]
