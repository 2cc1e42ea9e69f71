"""Fewer round trips: concurrent calls share one (group commit); one call per shard.

Workers that finish pages at about the same time each have links to add. While one
add is on its way to Redis, the loop parses other pages, and their adds queue here;
when the first comes back, everything queued goes in one call. An engine that is
idle pays nothing (its add goes at once); a busy one pays one round trip for many
pages, which is where its CPU and Redis's went.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Generic, TypeVar

T = TypeVar("T")
A = TypeVar("A")


class GroupCommit(Generic[T, A]):
    """``await commit(items)`` answers for ``items`` as ``send`` did, one answer each;
    calls made while a ``send`` runs are sent together by the next one, in order."""

    def __init__(self, send: Callable[[list[T]], Awaitable[Sequence[A]]]) -> None:
        self._send = send
        self._queue: list[tuple[Sequence[T], asyncio.Future[list[A]]]] = []
        self._sender: asyncio.Task[None] | None = None

    async def __call__(self, items: Sequence[T]) -> list[A]:
        future: asyncio.Future[list[A]] = asyncio.get_running_loop().create_future()
        self._queue.append((items, future))
        if self._sender is None or self._sender.done():
            self._sender = asyncio.create_task(self._drain(), name="frontier-group-commit")
        return await asyncio.shield(future)  # a caller cancelled leaves the batch intact

    async def _drain(self) -> None:
        while self._queue:
            batch, self._queue = self._queue, []
            try:
                answers = list(await self._send([item for items, _ in batch for item in items]))
            except asyncio.CancelledError:  # closing: nobody waits for an answer forever
                for _, future in batch + self._queue:
                    future.cancel()
                raise
            except Exception as exc:  # every caller of this batch learns it
                for _, future in batch:
                    if not future.done():
                        future.set_exception(exc)
                continue
            start = 0
            for items, future in batch:
                if not future.done():
                    future.set_result(answers[start : start + len(items)])
                start += len(items)


async def by_shard(
    items: Sequence[T],
    shard: Callable[[T], int],
    call: Callable[[int, list[T]], Awaitable[list[Any]]],
) -> list[Any]:
    """``call`` once per shard with its items, all at once; the answers in item order."""
    groups: dict[int, list[int]] = {}
    for index, item in enumerate(items):
        groups.setdefault(shard(item), []).append(index)
    answers = await asyncio.gather(
        *(call(s, [items[i] for i in indexes]) for s, indexes in groups.items())
    )
    out: list[Any] = [None] * len(items)
    for indexes, answer in zip(groups.values(), answers, strict=True):
        for index, value in zip(indexes, answer, strict=True):
            out[index] = value
    return out
