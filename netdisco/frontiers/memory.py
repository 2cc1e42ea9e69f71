"""The in-memory frontier: one process, gone when the process ends.

Its queue spills to disk beyond ``limit`` requests (the ``memory_queue_limit`` setting):
the first ones stay in memory (``netdisco.frontiers.head``), the rest wait encoded in a
temporary SQLite database (``netdisco.frontiers.spill``), so a crawl whose queue
outgrows memory goes on. The seen set stays in memory (16-byte fingerprints).

Within a priority, requests are taken in rounds over their hosts (a queue per host, as
Mercator's back queues): a host's n-th queued request is in round n, and a host seen
for the first time (or again after its queue ran dry) starts at the round being taken
now. So the queue hands out one request of each host with work in turn, and the hosts
behind one host's long run of links start at once: the downloader's ready queue
(``crawl.hosts``) then always has a request of a host that is due. The round and the
arrival order together are the key's ``order`` (``ROUND``), so the spill keeps it.
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Sequence

import structlog

from netdisco.exceptions import RequestNotShareable
from netdisco.frontiers.base import Codec, Frontier, Queued, R
from netdisco.frontiers.head import Head, Key
from netdisco.frontiers.spill import Spill

log = structlog.get_logger(__name__)
#: ``order`` = round x ROUND + arrival: 2**36 arrivals and 2**26 rounds a host fit in 63 bits
ROUND = 2**36
MAX_ROUND = 2**26 - 1
#: hosts whose latest round is remembered; past that all are forgotten, and each starts
#: again at the current round (its order among the others is lost, never a request)
HOSTS = 100_000


class MemoryFrontier(Frontier[R]):
    """A queue and a set of 16-byte fingerprints, in this process; the queue spills to a
    temporary file beyond ``limit`` requests when a ``codec`` can encode them (0: never).

    A request the codec cannot encode (a lambda callback) stays in memory, in its turn.
    Every optional ability keeps its default: nothing outlives the process.
    """

    def __init__(self, codec: Codec[R] | None = None, *, limit: int = 0) -> None:
        self.codec = codec if limit else None
        self._head: Head[R] = Head(max(2, limit) if self.codec else sys.maxsize)
        self._spill: Spill | None = None
        self._order = itertools.count()
        self._seen: set[bytes] = set()
        self._leased = 0
        self._rounds: dict[str, int] = {}  # host -> the round of its latest add
        self._round = 0  # the round of the request taken last

    async def add(self, requests: Sequence[R]) -> list[bool]:
        added = []
        out: list[tuple[Key, R]] = []
        for request in requests:
            new = request.dont_filter or request.fingerprint not in self._seen
            if new:
                self._seen.add(request.fingerprint)
                self._place(request, out)
            added.append(new)
        self._write(out)
        return added

    async def claim(self, requests: Sequence[Queued]) -> list[bool]:
        claimed = []
        for request in requests:
            new = request.fingerprint not in self._seen
            self._seen.add(request.fingerprint)
            claimed.append(new)
        return claimed

    async def take(self) -> R | None:
        if self._head.stale():
            self._read()
        entry = self._head.pop()
        if entry is None:
            return None
        self._leased += 1
        self._round = max(self._round, entry[0][1] // ROUND)
        return entry[1]

    async def done(self, request: R, *, requeue: bool = False) -> None:
        self._leased -= 1
        if requeue:  # to the back of its priority, as a new request
            out: list[tuple[Key, R]] = []
            self._place(request, out)
            self._write(out)

    async def counts(self) -> tuple[int, int, int]:
        spilled = self._spill.count if self._spill else 0
        return len(self._head) + spilled, self._leased, len(self._seen)

    async def close(self) -> None:
        """Drop the spilled queue (its file is gone already: see ``spill``)."""
        if self._spill is not None:
            self._spill.close()
            self._spill = None

    # -- spilling ------------------------------------------------------------------------

    def _place(self, request: R, out: list[tuple[Key, R]]) -> None:
        """Queue ``request`` in memory if the head reaches it; else, or what a full head
        trims, into ``out`` (for ``_write``)."""
        host = request.host_key
        turn = max(self._rounds.get(host, -1) + 1, self._round)
        if len(self._rounds) >= HOSTS and host not in self._rounds:
            self._rounds.clear()
        self._rounds[host] = turn
        key = (-request.priority, min(turn, MAX_ROUND) * ROUND + next(self._order))
        if not self._head.holds(key):
            out.append((key, request))
            return
        self._head.push(key, request)
        if self._head.over():
            out.extend(self._head.trim())

    def _write(self, entries: list[tuple[Key, R]]) -> None:
        if not entries:
            return
        assert self.codec is not None, "a frontier without a codec never trims"
        rows = []
        for key, request in entries:
            try:
                rows.append((key, self.codec.encode(request)))
            except RequestNotShareable:  # stays in memory; taken in its turn all the same
                self._head.push(key, request)
        if rows:
            if self._spill is None:
                self._spill = Spill()
                log.info("queue_spilled", limit=self._head.limit)
            self._spill.write(rows)

    def _read(self) -> None:
        assert self.codec is not None, "stale only once trimmed"
        batch = self._head.limit // 2
        rows = self._spill.read(batch) if self._spill else []
        entries = [(key, self.codec.decode(body)) for key, body in rows]
        self._head.refill(entries, rows[-1][0] if len(rows) == batch else None)
