"""One scheduled run per tick across every engine sharing a crawl.

Every engine of a shared crawl keeps the same schedule; at a tick each asks Redis
to record that tick's run for the crawl (``SET NX``): the first engine to ask
starts the run, the others count the tick as run elsewhere. The key expires, so
Redis keeps no history of ticks.
"""

from __future__ import annotations

from netdisco.frontiers.redis.options import RedisOptions, connect


async def claim_run(url: str, crawl: str, tick: float, owner: str, *, ttl: float = 3600.0) -> bool:
    """Whether this engine (``owner``) runs the tick ``tick`` of ``crawl``."""
    options = RedisOptions.from_url(url)
    key = f"{options.prefix}:{{{crawl}}}:run:{round(tick * 1000)}"  # ticks agree to the ms
    redis = connect(options.url, socket_connect_timeout=2.0, socket_timeout=5.0)
    try:
        return bool(await redis.set(key, owner, nx=True, ex=max(1, int(ttl))))
    finally:
        await redis.aclose()
