"""Fencing (``netdisco/_fence.py``) at the frontier, on a real Redis: a closed
fence takes and starts nothing; a new epoch gives every earlier lease back. The cut of a
real ZooKeeper link under two engines is in the fault suite (tests/faults/test_fence_cut.py).
"""

from __future__ import annotations

import asyncio
import uuid

from aiohttp import web
from redis import asyncio as aioredis

from netdisco import Crawler, Request, Settings, Spider
from netdisco._fence import Fence
from netdisco.crawl.codec import frontier_for
from netdisco.crawl.middleware import Middleware
from netdisco.frontiers.redis import RedisFrontier
from netdisco.frontiers.redis.leases import recover_owner
from netdisco.testing import RedisServer, eventually, serve
from tests.netdisco.redis_support import SiteSpider, make_request

SESSION_TIMEOUT = 2.0


async def blocks(awaitable: object, seconds: float = 0.3) -> bool:
    """Whether ``awaitable`` is still waiting after ``seconds`` (it is cancelled)."""
    task = asyncio.ensure_future(awaitable)  # type: ignore[call-overload]
    done, _ = await asyncio.wait([task], timeout=seconds)
    task.cancel()
    return not done


async def test_a_closed_fence_starts_nothing_and_a_new_epoch_gives_every_lease_back(
    redis_server: RedisServer,
) -> None:
    """The fence is ``RedisFrontier``'s, which owned hosts share (their own fencing, a
    bucket token, is ``test_owned``'s)."""
    prefix = f"f{uuid.uuid4().hex[:10]}"
    url = f"{redis_server.url}?prefix={prefix}&prefetch=4&politeness=engine"
    spider = SiteSpider(start_urls=["http://127.0.0.1:1/"])
    settings = Settings(frontier=url)
    fence = Fence()
    ours, theirs = frontier_for(settings, spider, "ours"), frontier_for(settings, spider, "theirs")
    assert isinstance(ours, RedisFrontier)
    assert isinstance(theirs, RedisFrontier)
    ours.fence = fence
    for frontier in (ours, theirs):
        frontier.set_politeness(0.0, 4)
    urls = [f"http://127.0.0.{n}:1/p" for n in range(1, 9)]  # a host each
    try:
        assert await ours.add([make_request(spider, u) for u in urls]) == [True] * 8
        held = await ours.take()
        assert held is not None
        assert await ours.may_start(held)

        fence.close("test: connection suspended")
        assert await blocks(ours.may_start(held))  # nothing starts while it is closed
        assert await blocks(ours.take())  # and nothing more is taken
        fence.lose()  # the session ended: the others recover our leases
        async with aioredis.from_url(redis_server.url) as redis:
            assert sum((await recover_owner(redis, prefix, "ours")).values()) >= 1
        recovered = await theirs.take()
        assert recovered is not None
        fence.open()

        assert not await ours.may_start(held)  # taken before the new epoch: never starts
        before = await theirs.counts()
        await ours.done(held, requeue=True)  # a no-op: the lease is theirs now
        assert await theirs.counts() == before
        fetched, refused = [recovered.url], 1
        await theirs.done(recovered)
        while True:  # both crawl on, as workers do: the stale ones go back, unfetched
            taken = [(f, await f.take()) for f in (ours, theirs)]
            if all(r is None for _, r in taken):
                break
            for frontier, request in taken:
                if request is None:
                    continue
                if await frontier.may_start(request):
                    fetched.append(request.url)
                    await frontier.done(request)
                else:
                    refused += 1
                    await frontier.done(request, requeue=True)
        await ours.flush()
        await theirs.flush()
        assert refused == 4  # the one it held and the three taken with it (prefetch)
        assert sorted(fetched) == sorted(urls)  # each once, nothing lost
        assert await theirs.counts() == (0, 0, 8)
    finally:
        await ours.close(hand_back=False)
        await theirs.close(hand_back=False)


def test_the_fence_of_a_frontier_nobody_fences_is_open() -> None:
    """A frontier of one process (memory, SQLite) never waits: nobody can take its leases."""
    from netdisco.frontiers import MemoryFrontier

    frontier: MemoryFrontier[Request] = MemoryFrontier()
    assert frontier.fence is None
    assert asyncio.run(frontier.may_start(Request("http://127.0.0.1:1/")))


class Waiting(Middleware):
    """Holds ``/b`` between the fence's check and its send, once: what any await there
    (a middleware, the host's turn) may do while the fence closes."""

    def __init__(self) -> None:
        self.reached, self.release = asyncio.Event(), asyncio.Event()

    async def process_request(self, request: Request, spider: Spider) -> None:
        if request.url.endswith("/b") and not self.reached.is_set():
            self.reached.set()
            await asyncio.wait_for(self.release.wait(), 30)


async def test_a_fence_that_closes_after_its_check_still_sends_nothing(
    redis_server: RedisServer,
) -> None:
    """The fence is asked again at the last instant before a request goes out: ``/b``
    passed the check, then waited while the fence closed; it is not sent, goes back, and
    is fetched once the fence opens in a new epoch."""
    fence, waiting = Fence(), Waiting()
    sent: list[tuple[str, bool]] = []  # (path, whether the fence was closed then)

    async def page(request: web.Request) -> web.Response:
        sent.append((request.path, not fence.is_open))
        return web.Response(text="<html>page</html>", content_type="text/html")

    class Held(SiteSpider):
        def middlewares(self) -> list[Middleware]:
            return [waiting]

    app = web.Application()
    app.router.add_get("/{name}", page)
    async with serve(app) as base:
        url = f"{redis_server.url}?prefix=w{uuid.uuid4().hex[:10]}&politeness=engine"
        spider = Held(start_urls=[f"{base}/b"])
        settings = Settings(frontier=url, obey_robots=False, retries=0, progress_interval=0)
        crawler = Crawler(spider, settings, frontier=frontier_for(settings, spider, "ours"))
        crawler.frontier.fence = fence
        run = asyncio.ensure_future(crawler.run())
        try:
            await asyncio.wait_for(waiting.reached.wait(), 30)
            fence.close("test: connection suspended")
            waiting.release.set()
            await eventually(lambda: crawler.stats.in_flight == 0, "b given back")
            assert sent == []
            fence.lose()  # the session ended: a new epoch; what was taken before goes back
            fence.open()
            stats = await asyncio.wait_for(run, 30)
        finally:
            run.cancel()
    assert sent == [("/b", False)]  # once, and only once the fence was open again
    assert stats.succeeded == 1
