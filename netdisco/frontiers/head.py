"""The first requests of a queue in memory, the rest on disk: ``Head``.

A queue's order is its key ``(-priority, order)``: higher priority first, FIFO
within a priority (``order`` grows with every add). ``Head`` keeps in memory every
waiting entry whose key is at most ``bound``, and nothing says which entry beyond it
waits where: the owner keeps those on disk, in key order, and hands the next ones
back (``refill``) when the head runs out. So a take costs no I/O most of the time, and
memory holds at most ``limit`` entries however long the queue grows. ``bound`` None:
everything waiting is in memory (nothing beyond on disk), as in a small crawl.

Used by the ``state_dir`` frontier (``netdisco.frontiers.sqlite``: its rows stay on
disk until acknowledged, the head is a cache of them) and by the memory frontier once
it spills (``netdisco.frontiers.spill``: the head is the only copy, the disk the rest).
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from typing import Generic, TypeVar

T = TypeVar("T")
#: ``(-priority, order)``: the smallest is taken first
Key = tuple[int, int]
#: a bound before every key: nothing is in memory yet, everything waits on disk
FIRST: Key = (-(2**64), -1)


class Head(Generic[T]):
    """At most ``limit`` entries in memory (see the module docstring)."""

    def __init__(self, limit: int, *, bound: Key | None = None) -> None:
        if limit < 2:
            raise ValueError(f"a head holds at least 2 entries, not {limit}")
        self.limit = limit
        self.bound = bound
        self._heap: list[tuple[Key, T]] = []

    def __len__(self) -> int:
        return len(self._heap)

    def holds(self, key: Key) -> bool:
        """Whether an entry of ``key`` belongs in memory (else on disk, beyond ``bound``)."""
        return self.bound is None or key <= self.bound

    def push(self, key: Key, entry: T) -> None:
        """Keep ``entry`` in memory (the owner asked ``holds``, or it cannot go to disk)."""
        heapq.heappush(self._heap, (key, entry))

    def over(self) -> bool:
        """Whether the head outgrew its limit (the owner then calls ``trim``)."""
        return len(self._heap) > self.limit

    def trim(self) -> list[tuple[Key, T]]:
        """Keep the first half of ``limit`` in memory; the rest, in key order, goes to disk
        (the caller writes it, or drops it when it is on disk already)."""
        self._heap.sort()  # a sorted list is a heap
        keep = self.limit // 2
        self._heap, rest = self._heap[:keep], self._heap[keep:]
        if self._heap:
            self.bound = self._heap[-1][0]
        return rest

    def stale(self) -> bool:
        """Whether the next take must ``refill`` first: the head is empty while entries
        may wait beyond ``bound``, or its first entry comes after some of those (one that
        could not go to disk, or was put back after a trim)."""
        if self.bound is None:
            return False
        return not self._heap or self._heap[0][0] > self.bound

    def refill(self, rows: Sequence[tuple[Key, T]], last: Key | None) -> None:
        """The next entries from disk, in key order; ``last`` is the key of the last row
        read (skipped ones included), None when the disk holds nothing beyond them."""
        for key, entry in rows:
            heapq.heappush(self._heap, (key, entry))
        self.bound = last

    def pop(self) -> tuple[Key, T] | None:
        """The first entry in memory and its key (call ``stale``, and refill, first)."""
        if not self._heap:
            return None
        return heapq.heappop(self._heap)
