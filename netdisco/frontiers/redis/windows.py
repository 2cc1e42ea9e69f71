"""Flow control of owned hosts: per bucket, how many of its requests may wait in this
engine unstarted (``Windows``), so that an engine owning a host far bigger than the
crawl's room does not take and give back the same requests over and over."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

#: requests of a bucket taken and not started yet, at most, at first and ever: a bucket
#: whose requests come back unstarted (their hosts have no room here) gets half as many,
#: one more once as many as it may have waiting started (``Windows``,
#: TCP's congestion window), so a host bigger than the crawl's room is not taken and
#: given back over and over
CAP_FIRST, CAP_MAX = 16, 1024


class Windows:
    """Flow control: per bucket, how many of its requests may wait here unstarted.

    The crawl sets aside only a few requests a host and sends the rest back; an engine
    owning a host far bigger than that would take and give back the same requests over
    and over. So a bucket's window halves when one comes back unstarted and grows by one
    for each window's worth of starts (TCP's congestion window), and a bucket is asked
    only once half its window is free.
    """

    def __init__(self, wake: Callable[[], None]) -> None:
        self._wake = wake  # a take waiting for room
        self._out: Counter[int] = Counter()  # bucket -> requests taken, not started yet
        self._waiting: dict[str, int] = {}  # the ids of those -> their bucket
        self._caps: dict[int, float] = {}  # bucket -> its window (CAP_*)

    def room(self, bucket: int) -> int:
        """How many more requests of ``bucket`` a take may lease now."""
        return int(self._caps.get(bucket, CAP_FIRST)) - self._out[bucket]

    def worth_a_take(self, bucket: int) -> bool:
        """Half the window free: a busy host costs a round trip for every few pages."""
        return self.room(bucket) >= max(1, int(self._caps.get(bucket, CAP_FIRST)) // 2)

    def book(self, bucket: int) -> int:
        """The room a take of ``bucket`` asks for, booked until ``taken``: the crawl's
        workers take at once, and each must not see the same room free."""
        room = max(self.room(bucket), 0)
        self._out[bucket] += room
        return room

    def taken(self, bucket: int, rids: list[str], booked: int = 0) -> None:
        """``rids`` of ``bucket`` were leased to us (by a take that booked ``booked``):
        they wait until they start."""
        self._waiting.update(dict.fromkeys(rids, bucket))
        self._out[bucket] += len(rids) - booked
        if self._out[bucket] <= 0:
            del self._out[bucket]

    def left(self, rid: str, *, started: bool) -> None:
        """``rid`` waits here no more: it started (the window grows by one for every
        window of starts) or went back unstarted (it halves). Nothing if it did not wait."""
        bucket = self._waiting.pop(rid, None)
        if bucket is None:
            return
        worth = self.worth_a_take(bucket)
        self._out[bucket] -= 1
        cap = self._caps.get(bucket, CAP_FIRST)
        if started:
            self._caps[bucket] = min(CAP_MAX, cap + 1 / cap)
        else:
            self._caps[bucket] = max(1.0, min(cap, self._out[bucket] + 1) / 2)
        if self._out[bucket] <= 0:
            del self._out[bucket]
        if not worth and self.worth_a_take(bucket):
            self._wake()
