"""Where scheduled requests wait: the ``Frontier`` protocol and its in-memory form.

A frontier dedups by fingerprint, orders by priority and tracks requests taken
but not yet done (leases), so that a shared frontier (Redis) can hand a dead
engine's work to the living.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from netdisco.request import Request


class Frontier(Protocol):
    """The four operations the crawler needs from a frontier."""

    async def add(self, requests: Sequence[Request]) -> list[bool]:
        """Queue each request whose fingerprint is new; say for each whether it was."""

    async def take(self) -> Request | None:
        """The next request by priority (leased to us), or None if none is queued now."""

    async def done(self, request: Request, *, requeue: bool = False) -> None:
        """Release the lease on a request we took: finished, or put back when ``requeue``."""

    async def counts(self) -> tuple[int, int, int]:
        """``(queued, leased, seen)``, across every engine sharing this frontier."""


@runtime_checkable
class Connected(Protocol):
    """A frontier with a connection (Redis): opened at start, closed at the end.

    ``close`` hands back whatever this engine still holds, so others can take it.
    """

    async def open(self) -> None:
        """Connect, or raise ``FrontierUnavailable`` with the reason."""

    async def close(self) -> None:
        """Hand back our leases and disconnect."""


class MemoryFrontier:
    """A heap of requests and a set of 16-byte fingerprints, in this process."""

    def __init__(self) -> None:
        self._heap: list[tuple[int, int, Request]] = []
        self._order = itertools.count()
        self._seen: set[bytes] = set()
        self._leased = 0

    async def add(self, requests: Sequence[Request]) -> list[bool]:
        added = []
        for request in requests:
            new = request.dont_filter or request.fingerprint not in self._seen
            if new:
                self._seen.add(request.fingerprint)
                heapq.heappush(self._heap, (-request.priority, next(self._order), request))
            added.append(new)
        return added

    async def take(self) -> Request | None:
        if not self._heap:
            return None
        self._leased += 1
        return heapq.heappop(self._heap)[2]

    async def done(self, request: Request, *, requeue: bool = False) -> None:
        self._leased -= 1
        if requeue:
            heapq.heappush(self._heap, (-request.priority, next(self._order), request))

    async def counts(self) -> tuple[int, int, int]:
        return len(self._heap), self._leased, len(self._seen)
