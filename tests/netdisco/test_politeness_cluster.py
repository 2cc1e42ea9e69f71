"""Three engine processes, three hosts: the per-host limits hold for them together,
measured where it matters, at the server (``tests.netdisco.hosts_support``).

A start is when the server's kernel received the request (``SO_TIMESTAMPNS``): what
the site sees, however late the server's own loop reads it. No slack is allowed: at a
tie an end counts before a start.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from netdisco.testing import RedisServer
from tests.netdisco.hosts_support import (
    PAGES,
    closest_pair,
    hosts,
    most_in_flight,
    results,
    start_engines,
)

ENGINES = 3
ADDRESSES = ("127.0.0.1", "127.0.0.2", "127.0.0.3")


async def crawl(
    redis_url: str, delay: float, per_host: int, bases: list[str]
) -> list[dict[str, Any]]:
    """Start ENGINES processes, let them go at once, and collect what each reports."""
    return await results(await start_engines(ENGINES, redis_url, delay, per_host, bases))


@pytest.fixture
def redis_url(redis_server: RedisServer) -> str:
    return f"{redis_server.url}?prefix=p{uuid.uuid4().hex[:10]}"


@pytest.mark.timeout(300)
async def test_delay_and_slots_hold_across_engines_at_the_server(redis_url: str):
    delay = 0.05
    async with hosts(ADDRESSES, latency=0.02) as sites:
        throttled = sites[2][1]
        throttled.throttle["/p3.html"] = 0.5  # a 429 with Retry-After: 0.5
        results = await crawl(redis_url, delay, 2, [base for base, _ in sites])
    assert [r["state"] for r in results] == ["finished"] * ENGINES
    assert sum(r["pages"] for r in results) == (PAGES - 1) * len(sites)
    assert sum(r["retried"] for r in results) == 1
    for _, site in sites:
        pages = {v.path for v in site.visits if v.status == 200}
        assert len(pages) == PAGES - 1  # nothing lost; robots.txt obeyed
        # once by each engine that owned the host (it moves at most once a join)
        assert site.robots_fetches <= ENGINES
        assert most_in_flight(site.visits) <= 2
        gap, pair = closest_pair(site.visits)
        assert gap >= delay, pair
    refused = next(v for v in throttled.visits if v.status == 429)
    after = min(v.start for v in throttled.visits if v.start > refused.end)
    assert after - refused.end >= 0.5  # every engine waited out the Retry-After


@pytest.mark.timeout(300)
async def test_without_a_delay_each_host_has_its_slots_across_engines(redis_url: str):
    async with hosts(ADDRESSES, latency=0.03) as sites:
        results = await crawl(redis_url, 0.0, 2, [base for base, _ in sites])
    assert sum(r["pages"] for r in results) == (PAGES - 1) * len(sites)
    for _, site in sites:
        assert len({v.path for v in site.visits}) == PAGES - 1
        assert most_in_flight(site.visits) <= 2
