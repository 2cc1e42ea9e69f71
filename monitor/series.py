"""Rate series in fixed memory: the ring buffers behind the dashboard's charts.

A slot holds the seconds it covers and, per rate, the rate times those seconds, so
merging slots (a minute's reads, an hour's minutes) is a mean weighted by time and a
slot of zero seconds is a gap (the spider did not run). Values are float32 in
:mod:`array` rings: 24 bytes a slot whatever the numbers (docs/monitor.md#charts).
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterator

#: the charted rates, in the order of a sample and of a row
RATES = ("pages", "items", "errors")
#: at most this many points per series in an answer (the server downsamples to it)
MAX_POINTS = 120

Rates = tuple[float, float, float]
#: one answer row: [time, pages/s, items/s, errors/s]; a rate is None where nothing ran
Row = list[float | None]


class Tier:
    """A ring of ``capacity`` slots: one per read (``width`` 0) or per ``width`` seconds."""

    __slots__ = ("_head", "_keys", "_seconds", "_sums", "capacity", "width")

    def __init__(self, capacity: int, width: float = 0.0) -> None:
        self.capacity = capacity
        self.width = width
        self._head = 0  # index of the oldest slot once the ring is full
        self._keys = array("d")  # a read's time, or the start of its width
        self._seconds = array("f")
        self._sums = tuple(array("f") for _ in RATES)

    def __len__(self) -> int:
        return len(self._keys)

    def add(self, at: float, seconds: float, rates: Rates | None) -> None:
        """``rates`` over the ``seconds`` before ``at``; None: not running (a gap)."""
        key = math.floor(at / self.width) * self.width if self.width else at
        weight = seconds if rates is not None else 0.0
        values = rates if rates is not None else (0.0, 0.0, 0.0)
        last = self._last()
        if last is not None and key < self._keys[last]:
            return  # the clock went back: keep the ring in time order
        if last is not None and self.width and key == self._keys[last]:
            self._seconds[last] += weight
            for sums, value in zip(self._sums, values, strict=True):
                sums[last] += value * weight
            return
        self._put(key, weight, [value * weight for value in values])

    def _last(self) -> int | None:
        if not self._keys:
            return None
        return (self._head - 1) % len(self._keys) if len(self._keys) == self.capacity else -1

    def _put(self, key: float, weight: float, sums: list[float]) -> None:
        if len(self._keys) < self.capacity:
            self._keys.append(key)
            self._seconds.append(weight)
            for ring, value in zip(self._sums, sums, strict=True):
                ring.append(value)
            return
        slot = self._head
        self._head = (self._head + 1) % self.capacity
        self._keys[slot], self._seconds[slot] = key, weight
        for ring, value in zip(self._sums, sums, strict=True):
            ring[slot] = value

    def _slots(self) -> Iterator[int]:
        """Indexes oldest first."""
        size = len(self._keys)
        start = self._head if size == self.capacity else 0
        return ((start + n) % size for n in range(size))

    def rows(self, since: float, step: float = 0.0) -> list[Row]:
        """The slots from ``since`` on, oldest first, merged into ``step``-second buckets
        (0: as kept), each as ``[time, pages/s, items/s, errors/s]``."""
        out: list[Row] = []
        bucket: float | None = None
        seconds, sums = 0.0, [0.0, 0.0, 0.0]
        for slot in self._slots():
            key = self._keys[slot]
            if key < since:
                continue
            start = math.floor(key / step) * step if step else key
            if bucket is not None and start != bucket:
                out.append(_row(bucket, seconds, sums))
                seconds, sums = 0.0, [0.0, 0.0, 0.0]
            bucket = start
            seconds += self._seconds[slot]
            sums = [total + ring[slot] for total, ring in zip(sums, self._sums, strict=True)]
        if bucket is not None:
            out.append(_row(bucket, seconds, sums))
        return out


def _row(at: float, seconds: float, sums: list[float]) -> Row:
    if seconds <= 0:
        return [round(at, 3), None, None, None]
    return [round(at, 3), *(round(total / seconds, 3) for total in sums)]


def rates_between(
    before: Rates | None, after: Rates | None, seconds: float, max_gap: float
) -> Rates | None:
    """Per-second rates of counters read ``seconds`` apart; None when there is no
    honest rate: a first read, a gap past ``max_gap``, or a counter that went back
    (a new run started from zero)."""
    if before is None or after is None or not 0 < seconds <= max_gap:
        return None
    if any(a < b for a, b in zip(after, before, strict=True)):
        return None
    pages, items, errors = ((a - b) / seconds for a, b in zip(after, before, strict=True))
    return (pages, items, errors)


def sum_rates(many: list[Rates | None]) -> Rates | None:
    """The rates of an engine: the sum of its spiders that have one (None: none has)."""
    rated = [r for r in many if r is not None]
    if not rated:
        return None
    pages, items, errors = (math.fsum(r[n] for r in rated) for n in range(len(RATES)))
    return (pages, items, errors)
