"""Three engine processes, three hosts: the per-host limits hold for them together,
measured where it matters, at the server (``tests.netdisco.hosts_support``).

The server's clock is ``time.monotonic``; the only slack allowed is its own
granularity: at a tie an end counts before a start.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

from netdisco.testing import RedisServer, serve
from tests.netdisco.hosts_support import (
    PAGES,
    LoggingHost,
    closest_starts,
    most_in_flight,
)

ENGINES = 3
ADDRESSES = ("127.0.0.1", "127.0.0.2", "127.0.0.3")


@contextlib.asynccontextmanager
async def hosts(latency: float) -> AsyncIterator[list[tuple[str, LoggingHost]]]:
    sites = [LoggingHost(latency) for _ in ADDRESSES]
    async with contextlib.AsyncExitStack() as stack:
        bases = [
            await stack.enter_async_context(serve(s.app(), a))
            for s, a in zip(sites, ADDRESSES, strict=True)
        ]
        yield list(zip(bases, sites, strict=True))


async def crawl(
    redis_url: str, delay: float, per_host: int, bases: list[str]
) -> list[dict[str, Any]]:
    """Start ENGINES processes, let them go at once, and collect what each reports."""
    argv = ["-m", "tests.netdisco.hosts_support", redis_url, str(delay), str(per_host), *bases]
    procs = [
        await asyncio.create_subprocess_exec(
            sys.executable, *argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE
        )
        for _ in range(ENGINES)
    ]
    for proc in procs:
        assert proc.stdout is not None
        assert (await proc.stdout.readline()).strip() == b"ready"
    for proc in procs:
        assert proc.stdin is not None
        proc.stdin.write(b"go\n")
        await proc.stdin.drain()
    results = []
    for proc in procs:
        out, _ = await asyncio.wait_for(proc.communicate(), 300)
        results.append(json.loads(out.splitlines()[-1]))
    return results


@pytest.fixture
def redis_url(redis_server: RedisServer) -> str:
    return f"{redis_server.url}?prefix=p{uuid.uuid4().hex[:10]}"


@pytest.mark.timeout(300)
async def test_delay_and_slots_hold_across_engines_at_the_server(redis_url: str):
    delay = 0.05
    async with hosts(latency=0.02) as sites:
        throttled = sites[2][1]
        throttled.throttle["/p3.html"] = 0.5  # a 429 with Retry-After: 0.5
        results = await crawl(redis_url, delay, 2, [base for base, _ in sites])
    assert [r["state"] for r in results] == ["finished"] * ENGINES
    assert sum(r["pages"] for r in results) == (PAGES - 1) * len(sites)
    assert sum(r["retried"] for r in results) == 1
    for _, site in sites:
        pages = {v.path for v in site.visits if v.status == 200}
        assert len(pages) == PAGES - 1  # nothing lost; robots.txt obeyed
        assert site.robots_fetches == 1  # once per host for the three engines
        assert most_in_flight(site.visits) <= 2
        assert closest_starts(site.visits) >= delay
    refused = next(v for v in throttled.visits if v.status == 429)
    after = min(v.start for v in throttled.visits if v.start > refused.end)
    assert after - refused.end >= 0.5  # every engine waited out the Retry-After


@pytest.mark.timeout(300)
async def test_without_a_delay_each_host_has_its_slots_across_engines(redis_url: str):
    async with hosts(latency=0.03) as sites:
        results = await crawl(redis_url, 0.0, 2, [base for base, _ in sites])
    assert sum(r["pages"] for r in results) == (PAGES - 1) * len(sites)
    for _, site in sites:
        assert len({v.path for v in site.visits}) == PAGES - 1
        assert most_in_flight(site.visits) <= 2
