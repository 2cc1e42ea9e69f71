"""Bytes Redis holds per queued request and per seen URL, for each ``seen`` mode.

Queues N requests (URLs of a realistic shape, the default callback) through a real
``RedisFrontier`` on a private ``redis-server`` and reads ``used_memory`` before and
after. Usage: ``python bench/redis_bytes.py [N]`` (default 200,000).
"""

from __future__ import annotations

import asyncio
import sys
import uuid

from redis import asyncio as aioredis

from netdisco import Request, Spider
from netdisco.crawl.codec import RequestCodec
from netdisco.crawl.scheduler import fingerprint
from netdisco.frontiers.redis import RedisFrontier, RedisOptions
from netdisco.testing import RedisServer


class Site(Spider):
    name = "site"

    def parse(self, response):  # type: ignore[no-untyped-def]
        yield from ()


async def used(url: str) -> int:
    client = aioredis.Redis.from_url(url)
    try:
        info = await client.info("memory")
        return int(info["used_memory"])
    finally:
        await client.aclose()


async def measure(url: str, seen: str, count: int) -> tuple[float, float]:
    """(bytes a queued request, bytes a seen URL once its request was taken and done)."""
    spider = Site()
    options = RedisOptions.from_url(f"{url}?prefix=b{uuid.uuid4().hex[:8]}&seen={seen}")
    frontier = RedisFrontier(options, spider.name, RequestCodec(spider))
    before = await used(url)
    batch = []
    for n in range(count):
        request = Request(f"https://docs.example.org/section-{n % 97}/page-{n}.html",
                          callback=spider.parse, depth=3)  # fmt: skip
        request.fingerprint = fingerprint(request)
        batch.append(request)
        if len(batch) == 1000:
            await frontier.add(batch)
            batch = []
    queued = await used(url)
    while (taken := await frontier.take()) is not None:
        await frontier.done(taken)
    drained = await used(url)
    await frontier.close()
    return (queued - before) / count, (drained - before) / count


async def main(count: int) -> None:
    with RedisServer() as server:
        for seen in ("exact", "bloom"):
            per_request, per_seen = await measure(server.url, seen, count)
            print(
                f"seen={seen}: {per_request:.0f} bytes a queued request (the seen set "
                f"included), {per_seen:.0f} a seen URL after ({count:,})"
            )


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 200_000))
