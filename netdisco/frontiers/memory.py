"""The in-memory frontier: one process, gone when the process ends."""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Sequence

from netdisco.frontiers.base import Frontier, Queued, R


class MemoryFrontier(Frontier[R]):
    """A heap of requests and a set of 16-byte fingerprints, in this process.

    Every optional ability keeps its default: nothing outlives the process.
    """

    def __init__(self) -> None:
        self._heap: list[tuple[int, int, R]] = []
        self._order = itertools.count()
        self._seen: set[bytes] = set()
        self._leased = 0

    async def add(self, requests: Sequence[R]) -> list[bool]:
        added = []
        for request in requests:
            new = request.dont_filter or request.fingerprint not in self._seen
            if new:
                self._seen.add(request.fingerprint)
                heapq.heappush(self._heap, (-request.priority, next(self._order), request))
            added.append(new)
        return added

    async def claim(self, requests: Sequence[Queued]) -> list[bool]:
        claimed = []
        for request in requests:
            new = request.fingerprint not in self._seen
            self._seen.add(request.fingerprint)
            claimed.append(new)
        return claimed

    async def take(self) -> R | None:
        if not self._heap:
            return None
        self._leased += 1
        return heapq.heappop(self._heap)[2]

    async def done(self, request: R, *, requeue: bool = False) -> None:
        self._leased -= 1
        if requeue:
            heapq.heappush(self._heap, (-request.priority, next(self._order), request))

    async def counts(self) -> tuple[int, int, int]:
        return len(self._heap), self._leased, len(self._seen)
