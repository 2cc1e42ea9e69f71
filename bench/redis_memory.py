"""Bytes of Redis memory per queued request of a shared crawl (issue 28).

    .venv/bin/python bench/redis_memory.py [--count 200000] [--hosts 100]
        [--options politeness=engine] [--seen-only]

Starts a private ``redis-server`` (as the tests do), opens the crawl's frontier (owned
hosts unless ``--options politeness=engine``), adds ``--count`` requests as a crawl
queues them (the scheduler's fingerprint, ``callback=parse``, depth 1-3, URLs of 60-80
characters over ``--hosts`` hosts) in batches of 500, and prints one JSON line:
``used_memory`` (``INFO memory``) before and after, and the difference per request.
Then takes a few and checks they read back, so that what was measured is a queue.

``--seen-only``: the seen set alone (``--options seen=bloom`` for the Bloom filter):
marks ``--count`` distinct URLs seen as redirect targets are (``claim``, nothing
queued), and prints the bytes a URL and how many new URLs were taken for seen ones
(the false positives, which a Bloom filter trades for its size).
"""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import Iterator
from typing import Any

import redis

from netdisco import Request, Response, Spider
from netdisco._servers import RedisServer
from netdisco.crawl.codec import RequestCodec
from netdisco.crawl.scheduler import fingerprint
from netdisco.frontiers.redis.frontier import RedisFrontier
from netdisco.frontiers.redis.options import RedisOptions
from netdisco.frontiers.redis.owned import OwnedFrontier

BATCH = 500


class Shop(Spider):
    name = "shop"

    def parse(self, response: Response) -> Iterator[Any]:
        yield from ()


def requests(spider: Shop, count: int, hosts: int) -> Iterator[Request]:
    """Links as a crawl finds them: 60-80 characters, a callback, a depth."""
    for n in range(count):
        host = f"shop{n % hosts}.example-store.com"
        url = f"https://{host}/catalogue/category/item-{n:07d}/page-{n % 97}.html"
        request = Request(url, callback=spider.parse, depth=1 + n % 3)
        request.fingerprint = fingerprint(request)
        yield request


def batches(items: Iterator[Request], size: int) -> Iterator[list[Request]]:
    """``items`` in lists of ``size`` (the last may be shorter)."""
    batch: list[Request] = []
    for item in items:
        batch.append(item)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def used_memory(url: str) -> int:
    client = redis.Redis.from_url(url)
    try:
        return int(client.info("memory")["used_memory"])
    finally:
        client.close()


async def measure(url: str, count: int, hosts: int) -> dict[str, Any]:
    spider = Shop()
    options = RedisOptions.from_url(url)
    kind = RedisFrontier if options.politeness == "engine" else OwnedFrontier
    frontier = kind(options, spider.name, RequestCodec(spider), owner="bench")
    await frontier.open()
    before = used_memory(options.url)
    urls = 0
    for batch in batches(requests(spider, count, hosts), BATCH):
        urls += sum(len(request.url) for request in batch)
        await frontier.add(batch)
    after = used_memory(options.url)
    queued, _, seen = await frontier.counts()
    taken = [await frontier.take() for _ in range(3)]
    await frontier.close()
    return {
        "count": count,
        "hosts": hosts,
        "politeness": options.politeness,
        "queued": queued,
        "seen": seen,
        "mean_url": round(urls / count, 1),
        "used_memory_before": before,
        "used_memory_after": after,
        "bytes_per_request": round((after - before) / count, 1),
        "took_back": all(request is not None for request in taken),
    }


async def measure_seen(url: str, count: int, hosts: int) -> dict[str, Any]:
    spider = Shop()
    options = RedisOptions.from_url(url)
    kind = RedisFrontier if options.politeness == "engine" else OwnedFrontier
    frontier = kind(options, spider.name, RequestCodec(spider), owner="bench")
    await frontier.open()
    before = used_memory(options.url)
    false_positives = 0  # claims always ask Redis: every False is the filter's
    for batch in batches(requests(spider, count, hosts), 5 * BATCH):
        false_positives += (await frontier.claim(batch)).count(False)
    after = used_memory(options.url)
    _, _, seen = await frontier.counts()
    await frontier.close()
    return {
        "count": count,
        "seen_mode": options.seen_mode(),
        "seen": seen,
        "false_positives": false_positives,
        "used_memory_before": before,
        "used_memory_after": after,
        "bytes_per_url": round((after - before) / count, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=200_000)
    parser.add_argument("--hosts", type=int, default=100)
    parser.add_argument("--options", default="", help="frontier query options, a=b&c=d")
    parser.add_argument("--seen-only", action="store_true", help="the seen set alone")
    args = parser.parse_args()
    with RedisServer() as server:
        url = f"{server.url}?prefix=bench" + (f"&{args.options}" if args.options else "")
        run = measure_seen if args.seen_only else measure
        print(json.dumps(asyncio.run(run(url, args.count, args.hosts))))


if __name__ == "__main__":
    main()
