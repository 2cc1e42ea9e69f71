"""The crawl's epoch: how an engine tells the crawl it joined from a Redis that lost it.

The first engine writes a random epoch; every script checks it before any write, so
a Redis restarted empty, flushed, or failed over to a replica that never had the
crawl answers ``NETDISCO_LOST`` instead of an empty queue that reads as "finished".

With several shards (hash tags, so several nodes of a cluster) every shard holds the
same epoch, so that each script checks its own slot's copy. Shard 0 decides it
(``SET NX``), the joining engine copies it to the shards that lack one, and shard 0
then records that all hold it (``epoch_all``). Once recorded, a shard without the
epoch lost it (its node came back empty): joining is refused rather than the shard
quietly started afresh while the others hold a crawl half done. The counts that
decide a crawl's end are read with every shard's epoch (``read_counts``).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from netdisco.frontiers.redis.leases import Client, Keys, text


async def join_epoch(redis: Client, shards: Sequence[Keys]) -> tuple[str, str | None]:
    """``(epoch, None)``, or ``(epoch, what a shard holds instead)`` when one lost it."""
    first = shards[0]
    await redis.set(first.epoch, uuid.uuid4().hex, nx=True)
    epoch = text(await redis.get(first.epoch))
    if len(shards) == 1:
        return epoch, None
    complete = text(await redis.get(first.epoch_all)) == epoch
    for keys in shards[1:]:
        if not complete:
            await redis.set(keys.epoch, epoch, nx=True)
        found = await redis.get(keys.epoch)
        if found is None or text(found) != epoch:
            return epoch, text(found)
    await redis.set(first.epoch_all, epoch)
    return epoch, None


async def read_counts(
    redis: Client, shards: Sequence[Keys], bloom: bool
) -> tuple[list[str], int, int, int]:
    """``(epochs, queued, leased, seen)`` over every shard, in one pipeline (an epoch is
    ``"None"`` where a shard holds none).

    """
    async with redis.pipeline(transaction=False) as pipe:
        for keys in shards:  # the same reads for every shard
            pipe.get(keys.epoch)
            pipe.zcard(keys.leases)
            pipe.get(keys.seen_count) if bloom else pipe.scard(keys.seen)
            pipe.zcard(keys.queue)
        found = list(await pipe.execute())
    step = len(found) // len(shards)
    rows = [found[at : at + step] for at in range(0, len(found), step)]
    queued = sum(int(n or 0) for row in rows for n in row[3:])
    leased = sum(int(row[1]) for row in rows)
    seen = sum(int(row[2] or 0) for row in rows)
    return [text(row[0]) for row in rows], queued, leased, seen
