"""Issue 28: queues longer than memory. The ``state_dir`` queue lives on disk behind a
bounded head; the memory frontier spills to a temporary SQLite file beyond its limit.

Both take in the order of a plain heap (priority, then FIFO), lose nothing and duplicate
nothing, at a head of a few requests; the memory bounds are measured in child processes
(peak RSS from ``/proc``), with a million requests queued.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from netdisco.crawl.codec import RequestCodec
from netdisco.crawl.request import Request
from netdisco.frontiers import Frontier
from netdisco.frontiers.memory import MemoryFrontier
from netdisco.frontiers.sqlite import SqliteFrontier
from tests.netdisco.redis_support import make_request, site_spider

SPIDER = site_spider("http://127.0.0.1:1")
Model = dict[str, tuple[int, int]]  # url -> (-priority, order): what should wait


def request(n: int, priority: int) -> Request:
    return make_request(SPIDER, f"http://127.0.0.1:1/{n}", priority=priority)


async def churn(frontier: Frontier[Request], durable: bool, seed: int) -> list[str]:
    """Random adds (duplicates among them), takes, acks and requeues, each take checked
    against a model heap; returns the URLs taken, in order, and drains what is left."""
    rng = random.Random(seed)
    waiting: Model = {}
    leased: dict[str, tuple[Request, tuple[int, int]]] = {}
    order = 0
    taken: list[str] = []
    for _ in range(600):
        roll = rng.random()
        if roll < 0.45:
            batch = [request(rng.randrange(400), rng.choice((0, 0, 1, 5))) for _ in range(5)]
            for req, new in zip(batch, await frontier.add(batch), strict=True):
                if new:
                    order += 1
                    waiting[req.url] = (-req.priority, order)
        elif roll < 0.8:
            got = await frontier.take()
            if not waiting:
                assert got is None
                continue
            assert got is not None
            assert waiting[got.url] == min(waiting.values()), got.url  # heap order
            leased[got.url] = (got, waiting.pop(got.url))
            taken.append(got.url)
        elif leased:
            url = rng.choice(sorted(leased))
            got, key = leased.pop(url)
            requeue = rng.random() < 0.4
            await frontier.done(got, requeue=requeue)
            if requeue:  # the durable queue keeps its row (and place), the memory one re-adds
                order += not durable
                waiting[url] = key if durable else (key[0], order)
        queued, in_flight, _ = await frontier.counts()
        assert (queued, in_flight) == (len(waiting), len(leased))
    while (got := await frontier.take()) is not None:
        key = waiting.pop(got.url)
        assert key <= min(waiting.values(), default=key), got.url
        taken.append(got.url)
    assert not waiting
    return taken


@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_the_state_dir_queue_takes_in_heap_order_through_a_head_of_four(
    tmp_path: Path, seed: int
) -> None:
    frontier = SqliteFrontier(tmp_path, SPIDER.name, RequestCodec(SPIDER), head_limit=4)
    await frontier.open()
    try:
        taken = await churn(frontier, durable=True, seed=seed)
        assert len(frontier._head) <= 5  # at most the limit, and one put back
    finally:
        await frontier.close()
    assert len(taken) > 100


async def test_a_reopened_state_dir_queue_resumes_in_order(tmp_path: Path) -> None:
    codec = RequestCodec(SPIDER)
    first = SqliteFrontier(tmp_path, SPIDER.name, codec, head_limit=4)
    await first.open()
    await first.add([request(n, n % 3) for n in range(30)])
    done = [await first.take() for _ in range(5)]
    for got in done[:3]:
        assert got is not None
        await first.done(got)  # two left in flight: queued again on reopening
    await first.close()
    again = SqliteFrontier(tmp_path, SPIDER.name, codec, head_limit=4)
    await again.open()
    try:
        assert (await again.counts())[:2] == (27, 0)
        urls = []
        while (got := await again.take()) is not None:
            urls.append(got.url)
    finally:
        await again.close()
    expected = sorted(range(30), key=lambda n: (-(n % 3), n))[3:]
    assert urls == [f"http://127.0.0.1:1/{n}" for n in expected]


def spill_files() -> list[str]:
    """This process's open SQLite temporary files (the spill: ``etilqs_*``)."""
    fds = Path("/proc/self/fd")
    links = [os.readlink(fd) for fd in fds.iterdir() if fd.is_symlink()]
    return [link for link in links if "/etilqs_" in link]


@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_the_memory_frontier_spills_beyond_its_limit_in_heap_order(seed: int) -> None:
    before = spill_files()
    frontier = MemoryFrontier(RequestCodec(SPIDER), limit=4)
    await churn(frontier, durable=False, seed=seed)
    # beyond SQLite's page cache (4 MiB), so that the spill is written to its file
    await frontier.add([request(1000 + n, 0) for n in range(20_000)])
    assert len(frontier._head) <= 4
    (spilled,) = set(spill_files()) - set(before)
    assert spilled.endswith(" (deleted)")  # unlinked at open: nothing left by a kill -9
    assert not os.path.exists(spilled.removesuffix(" (deleted)"))  # noqa: ASYNC240
    await frontier.close()
    assert spill_files() == before


async def test_a_request_that_cannot_be_spilled_waits_in_memory_in_its_turn() -> None:
    frontier = MemoryFrontier(RequestCodec(SPIDER), limit=4)
    await frontier.add([request(n, 0) for n in range(10)])
    lambdas = make_request(SPIDER, "http://127.0.0.1:1/lambda", meta={"not json": {1j}})
    await frontier.add([lambdas, *(request(n, 0) for n in range(10, 20))])
    urls = []
    while (got := await frontier.take()) is not None:
        urls.append(got.url.rsplit("/", 1)[1])
    assert urls == [*map(str, range(10)), "lambda", *map(str, range(10, 20))]
    await frontier.close()


#: a child process queues COUNT requests of 100-character URLs, 100 an add (a page's
#: links), and prints its peak RSS (VmHWM) after a warm-up of 20,000 and at the end
MEMORY = """
import asyncio, json, sys
from netdisco.crawl.codec import RequestCodec
from netdisco.crawl.request import Request
from netdisco.crawl.scheduler import fingerprint
from netdisco.frontiers import open_frontier
from tests.netdisco.redis_support import site_spider

def hwm():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024

async def main(count, state):
    spider = site_spider("http://127.0.0.1:1")
    frontier = open_frontier("memory", spider.name, RequestCodec(spider),
                             state_dir=state or None, memory_queue_limit=50_000)
    await frontier.open()
    warm = None
    for start in range(0, count, 100):
        batch = []
        for n in range(start, start + 100):
            r = Request(f"http://127.0.0.1:1/{n:012d}/" + "p" * 70, callback=spider.parse)
            r.fingerprint = fingerprint(r)
            batch.append(r)
        await frontier.add(batch)
        if start == 20_000:
            warm = hwm()
    queued = (await frontier.counts())[0]
    first = await frontier.take()
    await frontier.close()
    print(json.dumps({"warm": warm, "peak": hwm(), "queued": queued, "first": first.url}))

asyncio.run(main(int(sys.argv[1]), sys.argv[2]))
"""


def queue_peak(count: int, state: str) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, "-c", MEMORY, str(count), state],
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
        cwd=Path(__file__).parents[2],
    )
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["queued"] == count
    return result


@pytest.mark.slow
@pytest.mark.memory
@pytest.mark.timeout(600)
def test_a_million_queued_with_state_dir_stays_under_150_mb(tmp_path: Path) -> None:
    result = queue_peak(1_000_000, str(tmp_path / "state"))
    assert result["peak"] < 150, result
    assert result["peak"] - result["warm"] < 40, result  # flat: the queue is on disk


@pytest.mark.slow
@pytest.mark.memory
@pytest.mark.timeout(600)
def test_a_million_queued_in_the_memory_frontier_stays_under_200_mb() -> None:
    result = queue_peak(1_000_000, "")
    assert result["peak"] < 200, result
