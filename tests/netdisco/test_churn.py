"""Churn: three engines crawl six hosts while engines join, leave gracefully and are
killed with ``kill -9``, one change after every ``STEP`` pages the servers saw. Counted
at the servers (their own clock, in this process; the engines are processes of their
own): every page is fetched; a page fetched twice is one some killed engine held; no
two starts to a host come closer than the delay; the crawl ends."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections import Counter
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from netdisco.frontiers.redis.options import RedisOptions
from netdisco.frontiers.redis.owners import BUCKETS, BucketKeys
from tests.netdisco.hosts_support import (
    closest_starts,
    hosts,
    reachable,
    ready,
    results,
    spawn,
    tell,
)

ADDRESSES = tuple(f"127.0.0.{n}" for n in range(1, 7))
PAGES = 150  # a host: ~140 reachable pages, about 10 s at the delay
DELAY = 0.05
STEP = 90  # pages the servers see between two changes
#: the changes, in order: three engines start; the crawl keeps at least one
CHANGES = ("kill", "join", "leave", "join", "kill", "join")


class Pages:
    """How many page requests the servers saw; ``reached(n)`` waits for n."""

    def __init__(self) -> None:
        self.count = 0
        self._changed = asyncio.Event()

    def visited(self) -> None:
        self.count += 1
        self._changed.set()

    async def reached(self, count: int) -> None:
        while self.count < count:
            self._changed.clear()
            await self._changed.wait()


class Engines:
    """The engine processes of one crawl, and what the killed ones held."""

    def __init__(self, url: str, bases: list[str], items: Path) -> None:
        self.url, self.bases, self.items = url, bases, items
        self.live: list[tuple[asyncio.subprocess.Process, str]] = []
        self.ended: list[asyncio.subprocess.Process] = []
        self.joined = 0
        self.held_at_kills = 0  # leases the killed engines held: each may be fetched again
        options = RedisOptions.from_url(url)
        # a request lease is kept in its bucket's keys
        self.keys = [BucketKeys.of(options.prefix, "hosts", b) for b in range(BUCKETS)]
        self.redis = aioredis.Redis.from_url(options.url)

    async def join(self) -> None:
        self.joined += 1
        proc = await spawn(self.url, DELAY, 1, self.bases, self.items / f"{self.joined}.jsonl")
        owner = await ready(proc)
        await tell(proc, "go")
        self.live.append((proc, owner))

    async def kill(self) -> None:
        proc, owner = self.live.pop(0)
        # an engine may have finished the crawl on its own by now (one core: seen), and a
        # process that ended cannot be signalled; what it held counts either way
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGKILL)
        await proc.wait()  # dead: what it held stays in Redis until its lease ends
        async with self.redis.pipeline(transaction=False) as pipe:
            for keys in self.keys:
                pipe.scard(keys.owned(owner))
            self.held_at_kills += sum(await pipe.execute())

    async def leave(self) -> None:
        proc, _ = self.live.pop(0)
        with contextlib.suppress(ConnectionError):  # it finished on its own already
            await tell(proc, "stop")
        self.ended.append(proc)

    async def close(self) -> None:
        for proc, _ in self.live:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
        await self.redis.aclose()


@pytest.mark.timeout(240)
async def test_churn_loses_nothing_repeats_only_the_killed_engines_work_and_stays_polite(
    redis_url: str, tmp_path: Path
) -> None:
    """Hosts owned by one engine at a time, while engines join, leave and are killed."""
    pages = Pages()
    async with hosts(ADDRESSES, 0.02, PAGES, pages.visited) as sites:
        url = f"{redis_url}&lease_ttl=1"
        engines = Engines(url, [b for b, _ in sites], tmp_path)
        try:
            for _ in range(3):
                await engines.join()
            for number, change in enumerate(CHANGES, 1):
                await pages.reached(number * STEP)
                await getattr(engines, change)()
            survivors = [proc for proc, _ in engines.live]
            found = await results(engines.ended + survivors)
        finally:
            await engines.close()
    assert [r["state"] for r in found[len(engines.ended) :]] == ["finished"] * len(survivors)
    assert pages.count > len(CHANGES) * STEP  # the changes came while it crawled
    duplicates = 0
    for _, site in sites:
        fetched = Counter(v.path for v in site.visits if v.status == 200)
        assert set(fetched) == reachable(PAGES)  # every page
        duplicates += sum(n - 1 for n in fetched.values())
        assert closest_starts(site.visits + site.robots_visits) >= DELAY
    assert duplicates <= engines.held_at_kills
