"""Many concurrent takers against the host-queue scripts: the invariants, from the
scripts' own log (``trace=1``: every slot taken and released, on the Redis clock).

Hypothesis picks hosts, requests, the delay, the slots per host, how many takers
and what each does with what it took (done, put back, back off, the slot freed
before the ack) and how many shards the hosts spread over. Whatever the
interleaving, per host: never more slots held than allowed; with a delay, every
start comes at least the delay after the previous end (so after the previous
start), the end being when the response ended as the engine credited it; each
start has its end; nothing is lost.
"""

from __future__ import annotations

import asyncio
import random
import uuid
from dataclasses import dataclass

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from netdisco import Request
from netdisco.crawl.codec import RequestCodec
from netdisco.frontiers.redis import RedisOptions
from netdisco.frontiers.redis.hosts import HostQueueFrontier
from netdisco.testing import RedisServer
from tests.netdisco.hosts_support import assert_host_scripts_paced, trace_events
from tests.netdisco.redis_support import SiteSpider, make_request


@dataclass(frozen=True)
class Case:
    hosts: list[int]  # requests per host
    delay_ms: int
    per_host: int
    takers: int
    seed: int  # what each taker does with what it took
    shards: int  # hash tags the hosts spread over


cases = st.builds(
    Case,
    hosts=st.lists(st.integers(1, 6), min_size=1, max_size=4),
    delay_ms=st.sampled_from([0, 0, 2, 5]),
    per_host=st.integers(1, 3),
    takers=st.integers(2, 8),
    seed=st.integers(0, 2**16),
    shards=st.sampled_from([1, 3]),
)


async def run(case: Case, url: str) -> tuple[list[list[str]], tuple[int, int, int], int]:
    spider = SiteSpider(start_urls=[])
    query = f"prefix=q{uuid.uuid4().hex[:10]}&trace=1&prefetch=2&shards={case.shards}"
    options = RedisOptions.from_url(f"{url}?{query}")
    takers = [
        HostQueueFrontier(options, spider.name, RequestCodec(spider), owner=f"t{i}")
        for i in range(case.takers)
    ]
    for taker in takers:
        taker.set_politeness(case.delay_ms / 1000, case.per_host)
    requests = [
        make_request(spider, f"http://h{h}.test/p{n}")
        for h, count in enumerate(case.hosts)
        for n in range(count)
    ]
    await takers[0].add(requests)
    rng = random.Random(case.seed)
    plans = [random.Random(rng.random()) for _ in takers]
    try:
        await asyncio.gather(*(work(t, plan) for t, plan in zip(takers, plans, strict=True)))
        for taker in takers:
            await taker.flush()
        events = await trace_events(takers[0])
        counts = await takers[0].counts()
    finally:
        for taker in takers:
            await taker.close(hand_back=False)
    return events, counts, len(requests)


async def work(taker: HostQueueFrontier[Request], plan: random.Random) -> None:
    """Take until nothing is left; put some back, back some hosts off, finish the rest."""
    while (request := await taker.take()) is not None:
        choice = plan.random()
        if choice < 0.15 and request.attempts < 2:
            request.attempts += 1
            await taker.done(request, requeue=True)
        elif choice < 0.25 and request.attempts < 2:
            request.attempts += 1
            await taker.back_off(request, plan.choice([0.0, 0.003]))
        else:
            if plan.random() < 0.5:  # the response ended; parsing it takes a while
                taker.responded(request)
                if plan.random() < 0.5:  # the download is over: the slot is freed before the ack
                    taker.fetched(request)
            await asyncio.sleep(plan.choice([0, 0, 0.001, 0.004]))
            await taker.done(request)


def check(events: list[list[str]], case: Case) -> None:
    delay = case.delay_ms * 1000
    assert_host_scripts_paced(events, delay_us=delay, slots=1 if delay else case.per_host)


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(case=cases)
def test_host_invariants_hold_for_any_interleaving(redis_server: RedisServer, case: Case) -> None:
    events, counts, total = asyncio.run(run(case, redis_server.url))
    check(events, case)
    finished = {rid for what, _, _, rid in events if what == "end"}
    assert counts == (0, 0, total)  # nothing queued, nothing leased, every one seen
    assert len(finished) == total  # every request held a slot, and gave it back
