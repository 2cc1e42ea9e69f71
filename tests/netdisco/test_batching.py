"""``GroupCommit``: concurrent calls share one round trip (pure logic, no Redis)."""

from __future__ import annotations

import asyncio

import pytest

from netdisco.frontiers.redis.batching import GroupCommit


class Sender:
    """Records each batch; answers every item doubled, or fails a batch holding 13."""

    def __init__(self) -> None:
        self.batches: list[list[int]] = []
        self.gate = asyncio.Event()

    async def __call__(self, items: list[int]) -> list[int]:
        self.batches.append(items)
        await self.gate.wait()
        if 13 in items:
            raise RuntimeError("unlucky batch")
        return [2 * item for item in items]


async def test_calls_made_while_one_is_in_flight_go_together_in_order() -> None:
    send = Sender()
    commit = GroupCommit(send)
    first = asyncio.create_task(commit([1]))
    await asyncio.sleep(0)
    await asyncio.sleep(0)  # the first batch is on its way
    later = [asyncio.create_task(commit(items)) for items in ([2, 3], [], [4])]
    await asyncio.sleep(0)
    send.gate.set()
    assert await first == [2]
    assert [await task for task in later] == [[4, 6], [], [8]]
    assert send.batches == [[1], [2, 3, 4]]


async def test_a_failed_batch_fails_its_callers_only() -> None:
    send = Sender()
    commit = GroupCommit(send)
    send.gate.set()
    bad = asyncio.gather(commit([12]), commit([13]), return_exceptions=True)
    assert [repr(x) for x in await bad] == [repr(RuntimeError("unlucky batch"))] * 2
    assert await commit([5]) == [10]  # the next batch goes on


async def test_a_cancelled_caller_leaves_the_batch_intact() -> None:
    send = Sender()
    commit = GroupCommit(send)
    gone = asyncio.create_task(commit([1]))
    stays = asyncio.create_task(commit([2]))
    await asyncio.sleep(0)
    gone.cancel()
    send.gate.set()
    assert await stays == [4]
    with pytest.raises(asyncio.CancelledError):
        await gone
    assert send.batches == [[1, 2]]
