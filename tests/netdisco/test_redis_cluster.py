"""Owned hosts (the shared frontier's default) on a real Redis Cluster (3 masters, 3
replicas on loopback): three engine processes crawl six hosts; the per-host limits hold
at the server, every page's item is written; a master SIGKILLed mid-crawl is replaced
by its replica and nothing is lost (``tests.netdisco.hosts_support`` serves the hosts
and runs the engines).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from redis.asyncio.cluster import RedisCluster

from netdisco import Request
from netdisco.crawl.codec import RequestCodec
from netdisco.exceptions import ConfigError, CrawlLost
from netdisco.frontiers import is_shared
from netdisco.frontiers.redis import owned as owned_module
from netdisco.frontiers.redis.options import RedisOptions, connect
from netdisco.frontiers.redis.owned import OwnedFrontier
from netdisco.frontiers.redis.owners import (
    BUCKETS,
    BucketKeys,
    BucketLeases,
    bucket_of,
    free_incarnation,
    recover_engine,
)
from netdisco.frontiers.redis.runs import claim_run
from netdisco.testing import RedisClusterServer, eventually
from tests.netdisco.hosts_support import (
    PAGES,
    LoggingHost,
    closest_pair,
    closest_starts,
    hosts,
    most_in_flight,
    results,
    start_engines,
)
from tests.netdisco.redis_support import SiteSpider, make_request

ENGINES = 3
ADDRESSES = tuple(f"127.0.0.{n}" for n in range(1, 7))


@pytest.fixture(scope="module")
def cluster() -> Iterator[RedisClusterServer]:
    with RedisClusterServer(node_timeout_ms=1000) as server:
        yield server


def items_by_url(items: Path) -> dict[str, int]:
    """How many times each page's item was written, over every engine."""
    counts: dict[str, int] = {}
    for path in items.glob("*.jsonl"):
        for line in path.read_text().splitlines():
            url = json.loads(line)["url"]
            counts[url] = counts.get(url, 0) + 1
    return counts


def expected_pages(sites: list[tuple[str, LoggingHost]]) -> set[str]:
    """Every page the crawl must fetch (robots.txt keeps the last one of each host out)."""
    return {f"{base}/p{n}.html" for base, _ in sites for n in range(PAGES - 1)}


def test_the_cluster_setting_is_parsed_and_checked():
    url = "redis+cluster://127.0.0.1:7000,127.0.0.1:7001/0?prefix=x"
    assert is_shared(url)
    options = RedisOptions.from_url(url)
    assert (options.politeness, options.replicas, options.wait) == ("owner", 1, "all")
    bad = {
        "redis+cluster://127.0.0.1:7000,127.0.0.1/0": "node '127.0.0.1' .* is not host:port",
        "redis+cluster://127.0.0.1:7000/3": "database '/3' .* a cluster has only 0",
        "redis+cluster://127.0.0.1:7000/0?wait=some": "option wait must be adds or all",
    }
    for text, message in bad.items():
        with pytest.raises(ConfigError, match=message):
            RedisOptions.from_url(text)


def test_hosts_spread_over_buckets_whose_keys_share_one_slot_each():
    keys = [BucketKeys.of("p", "spider", b) for b in range(BUCKETS)]
    assert len({k.queue for k in keys}) == BUCKETS
    for k in keys:  # every key of a bucket carries the bucket's hash tag
        tag = k.queue[k.queue.index("{") : k.queue.index("}") + 1]
        assert all(tag in key for key in (k.epoch, k.lease, k.pace, k.leases, k.seen))
    spread = {bucket_of(f"127.0.0.{n}:8080", BUCKETS) for n in range(1, 2000)}
    assert len(spread) == BUCKETS


@pytest.fixture
async def frontiers(cluster: RedisClusterServer) -> AsyncIterator[list[OwnedFrontier[Request]]]:
    """Two engines' frontiers on one crawl of the cluster; the first alone a member yet,
    with its spider's requests queued."""
    url = f"{cluster.url}?prefix=f{uuid.uuid4().hex[:10]}"
    spider = SiteSpider(start_urls=[])
    made = [
        OwnedFrontier(RedisOptions.from_url(url), "s", RequestCodec(spider), owner=owner)
        for owner in ("a", "b")
    ]
    await made[0].open()
    await made[0].add(
        [make_request(spider, f"http://127.0.0.{n}:80/p{i}") for n in range(1, 9) for i in (1, 2)]
    )
    yield made
    for frontier in made:
        await frontier.close(hand_back=False)


async def test_a_lost_engines_leases_go_back_from_every_bucket(
    frontiers: list[OwnedFrontier[Request]],
):
    lost, alive = frontiers
    taken = [await lost.take() for _ in range(10)]
    assert all(taken)
    buckets = {bucket_of(r.host_key, BUCKETS) for r in taken if r is not None}
    assert len(buckets) > 1  # the leases are spread over several slots
    client = connect(lost.options.url)
    try:
        returned = await recover_engine(client, lost.options.prefix, "a")
    finally:
        await client.aclose()
    assert returned["s"] >= 10  # those handed out, and any the take leased beyond them
    await alive.open()
    await alive.settle()  # a member now (whatever the first beat saw): it wins every bucket
    again = []
    while (request := await alive.take()) is not None:
        again.append(request.url)
        await alive.done(request)
    assert len(again) == 16  # the 10 returned and the 6 never taken


async def test_a_bucket_that_lost_the_crawl_is_refused(
    frontiers: list[OwnedFrontier[Request]],
):
    first = frontiers[0]
    await first._redis.delete(first.shard_keys[3].epoch)  # as a node come back empty would
    with pytest.raises(CrawlLost):
        await first.counts()
    late = OwnedFrontier(first.options, "s", first.codec, owner="late")
    with pytest.raises(CrawlLost, match="no crawl"):
        await late.open()  # not a fresh bucket beside the others' half-done crawl
    await late.close(hand_back=False)


async def test_bucket_leases_spread_over_the_masters_acquired_and_renewed_in_one_pipeline(
    cluster: RedisClusterServer,
):
    client = connect(cluster.url)
    prefix, spider = f"o{uuid.uuid4().hex[:8]}", "s"
    try:
        mine = BucketLeases(client, prefix, spider, "a", ttl_ms=60_000)
        got = await mine.acquire_all(range(12))  # one pipeline over the three masters
        assert sorted(got) == list(range(12))
        assert all(acquired is not None for acquired in got.values())
        assert isinstance(client, RedisCluster)
        nodes = {str(client.get_node_from_key(mine.keys(b).lease)) for b in range(12)}
        assert len(nodes) == 3  # every master holds some of the buckets
        await client.delete(mine.keys(4).lease)  # as its TTL would end it
        assert await mine.renew() == {4}
        assert await free_incarnation(client, prefix, spider, "a") == 11
    finally:
        await client.aclose()


async def test_one_engine_runs_a_scheduled_tick_on_a_cluster(cluster: RedisClusterServer):
    crawl = f"crawl-{uuid.uuid4().hex[:8]}"
    claims = [await claim_run(cluster.url, crawl, 1234.5, owner) for owner in "abc"]
    assert claims == [True, False, False]


@pytest.mark.timeout(300)
async def test_three_engines_on_a_cluster_lose_nothing_and_stay_polite(
    cluster: RedisClusterServer, tmp_path: Path
):
    delay = 0.05
    url = f"{cluster.url}?prefix=c{uuid.uuid4().hex[:10]}"
    async with hosts(ADDRESSES, latency=0.02) as sites:
        bases = [base for base, _ in sites]
        found = await results(await start_engines(ENGINES, url, delay, 2, bases, tmp_path))
    assert [r["state"] for r in found] == ["finished"] * ENGINES
    items = items_by_url(tmp_path)
    assert set(items) == expected_pages(sites)  # every page's item, none missing
    for _, site in sites:
        # once by each engine that owned the host (it moves at most once a join)
        assert site.robots_fetches <= ENGINES
        assert most_in_flight(site.visits) <= 2
        gap, pair = closest_pair(site.visits)
        assert gap >= delay, pair


@pytest.mark.timeout(300)
async def test_without_a_delay_each_host_has_its_slots_on_a_cluster(
    cluster: RedisClusterServer, tmp_path: Path
):
    url = f"{cluster.url}?prefix=c{uuid.uuid4().hex[:10]}"
    async with hosts(ADDRESSES, latency=0.03) as sites:
        bases = [base for base, _ in sites]
        found = await results(await start_engines(ENGINES, url, 0.0, 2, bases, tmp_path))
    assert sum(r["pages"] for r in found) >= len(expected_pages(sites))
    assert set(items_by_url(tmp_path)) == expected_pages(sites)
    for _, site in sites:
        assert most_in_flight(site.visits) <= 2


@pytest.mark.timeout(120)
async def test_an_add_the_replica_missed_lands_on_it_when_the_master_dies(
    monkeypatch: pytest.MonkeyPatch,
):
    """An add reaches the master while its replica is cut off (its link dropped, the
    replica stopped so it cannot resync), then the master dies and the replica takes
    over without the add. Sent once, the links would be gone while the page that found
    them is acknowledged; an add no replica confirmed is sent again, so it lands on the
    promoted replica."""
    monkeypatch.setattr(owned_module, "ADD_TRIES", 50)  # still trying when the master dies
    spider = SiteSpider(start_urls=[])
    links = [make_request(spider, f"http://127.0.0.9:80/p{i}") for i in range(5)]
    with RedisClusterServer(node_timeout_ms=1000) as cluster:
        url = f"{cluster.url}?prefix=m{uuid.uuid4().hex[:10]}"
        frontier = OwnedFrontier(RedisOptions.from_url(url), "s", RequestCodec(spider))
        await frontier.open()
        bucket = frontier.bucket_keys[bucket_of(links[0].host_key, BUCKETS)]
        master = cluster.master_of(bucket.queue)
        replica = cluster.replica_of(master)
        assert replica.process is not None
        os.kill(replica.process.pid, signal.SIGSTOP)
        cluster.cli(master, "client", "kill", "type", "replica")
        try:
            adding = asyncio.create_task(frontier.add(links))
            queue = bucket.queue
            await eventually(lambda: cluster.cli(master, "exists", queue).strip() == "1", "add")
            # its WAIT ran out: sent once, the add would end here
            await eventually(lambda: frontier.unconfirmed >= 1, "an unconfirmed try", timeout=30)
            master.stop(signal.SIGKILL)
        finally:
            os.kill(replica.process.pid, signal.SIGCONT)
        assert await adding == [True] * len(links)
        await asyncio.to_thread(cluster.wait_ok)
        assert cluster.master_of(bucket.queue) is replica
        assert await frontier.counts() == (len(links), 0, len(links))
        await frontier.close(hand_back=False)


@pytest.mark.timeout(300)
async def test_a_master_killed_mid_crawl_is_replaced_and_nothing_is_lost(tmp_path: Path):
    with RedisClusterServer(node_timeout_ms=1000) as cluster:
        prefix = f"k{uuid.uuid4().hex[:10]}"
        url = f"{cluster.url}?prefix={prefix}&lease_ttl=3"
        async with hosts(ADDRESSES, latency=0.05) as sites:
            bases = [base for base, _ in sites]
            procs = await start_engines(ENGINES, url, 0.1, 1, bases, tmp_path)
            host = bases[0].split("//", 1)[1]
            queue = BucketKeys.of(prefix, "hosts", bucket_of(host, BUCKETS)).queue
            victim = cluster.master_of(queue)  # serves the first host's queue

            def visits() -> int:
                return sum(len(site.visits) for _, site in sites)

            await eventually(lambda: visits() >= 20, "the crawl under way")
            before = visits()
            killed_at = time.monotonic()
            victim.stop(signal.SIGKILL)
            await asyncio.to_thread(cluster.wait_ok)  # its replica now serves its slots
            failover = time.monotonic() - killed_at
            assert cluster.master_of(queue) is not victim
            found = await results(procs)
    assert [r["state"] for r in found] == ["finished"] * ENGINES
    items = items_by_url(tmp_path)
    assert set(items) == expected_pages(sites)  # nothing lost
    fetched = sum(len(site.visits) for _, site in sites)
    report = {
        "visits_before_kill": before,
        "seconds_to_failover": round(failover, 2),
        "pages": len(expected_pages(sites)),
        "fetches": fetched,
        "items_twice_or_more": sum(1 for n in items.values() if n > 1),
        "most_in_flight": max(most_in_flight(site.visits) for _, site in sites),
        "closest_starts": min(closest_starts(site.visits) for _, site in sites),
    }
    print("failover:", json.dumps(report))
