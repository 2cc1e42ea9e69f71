"""A Redis frontier's call never loses its caller's cancellation (pure asyncio: the
call's operation is a stand-in, no server)."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from netdisco import Request
from netdisco.crawl.codec import RequestCodec
from netdisco.frontiers.redis import RedisFrontier, RedisOptions
from tests.netdisco.redis_support import SiteSpider


def unconnected() -> RedisFrontier[Request]:
    spider = SiteSpider(start_urls=[])
    return RedisFrontier(RedisOptions.from_url("redis://127.0.0.1:1/0"), "s", RequestCodec(spider))


async def outlive_cancel(started: asyncio.Event) -> None:
    """Say it started, then wait until cancelled, and swallow the cancellation."""
    started.set()
    with contextlib.suppress(asyncio.CancelledError):
        await asyncio.Event().wait()


async def test_a_cancellation_the_operation_swallowed_is_raised_again() -> None:
    """redis-py may turn a cancellation into a TimeoutError and retry it to an answer
    (asyncio.timeout on Python 3.11): the task that was cancelled must still end, or a
    crawl's progress loop sleeps on after its crawl was told to stop."""
    frontier = unconnected()
    started = asyncio.Event()

    async def swallowing() -> str:
        await outlive_cancel(started)  # as a retry that answered would
        return "answer"

    call = asyncio.create_task(frontier._call(swallowing))
    await started.wait()
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    await frontier._redis.aclose()


async def test_a_call_made_while_cancelled_already_still_answers() -> None:
    """Clean-up after a cancellation (handing leases back) goes on: only a cancellation
    that arrives during the call is raised."""
    frontier = unconnected()
    started = asyncio.Event()

    async def cleanup() -> str:
        await outlive_cancel(started)
        return await frontier._call(answer)

    async def answer() -> str:
        return "answer"

    task = asyncio.create_task(cleanup())
    await started.wait()
    task.cancel()
    assert await task == "answer"
    await frontier._redis.aclose()
