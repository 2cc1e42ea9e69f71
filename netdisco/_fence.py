"""Fencing: an engine starts no leased work once its leases may belong to another.

A lease in a shared frontier is the engine's while its ZooKeeper session lives: when the
session ends (or the watchdog gives the node up), the other engines see the node lost
and put its leases back in the queue within a second
(``netdisco.frontiers.redis.recovery``). An engine cut off from ZooKeeper cannot tell
when that happens, so it stops at the first sign: kazoo reports the connection
SUSPENDED after at most two thirds of the session timeout, before the server can expire
the session. From then on:

* the fence is **closed**: no request is taken and none is started (a request already
  on the wire finishes; it may be fetched again elsewhere: at-least-once);
* the same session coming back **opens** it, and the engine goes on with what it held;
* a session that ended (LOST, or the node dropped by the watchdog) starts a new
  **epoch**: every request taken before it is stale, never started, and goes back to
  the frontier (a no-op where another engine already recovered it: the scripts check
  the owner per id). The fence opens again once ZooKeeper answers.

An engine without ZooKeeper has no fence: nobody could hand its leases out but the
deadline sweep, which its own heartbeat holds off while it runs.
"""

from __future__ import annotations

import asyncio
import time

import structlog

log = structlog.get_logger(__name__)


class Fence:
    """Whether this engine may start the work it leased (module docstring).

    ``close``, ``open`` and ``lose`` run on the loop; ``lose`` may also run on the
    watchdog's thread while the loop is blocked (it only counts the epoch on).
    """

    def __init__(self) -> None:
        self.epoch = 0  # sessions that ended under our leases
        self.closed_at: float | None = None  # monotonic, while closed
        self._open = asyncio.Event()
        self._open.set()

    @property
    def is_open(self) -> bool:
        return self._open.is_set()

    def close(self, why: str) -> None:
        """Start nothing until ``open`` (the session may be ending)."""
        if self._open.is_set():
            self._open.clear()
            self.closed_at = time.monotonic()
            log.warning("lease_fence_closed", why=why, epoch=self.epoch)

    def open(self) -> None:
        """ZooKeeper answers again: go on (with a new epoch, if ``lose`` came between)."""
        if not self._open.is_set():
            closed = 0.0 if self.closed_at is None else time.monotonic() - self.closed_at
            self.closed_at = None
            self._open.set()
            log.info("lease_fence_opened", epoch=self.epoch, closed_s=round(closed, 3))

    def lose(self) -> None:
        """The session ended: what was leased before may be another engine's now."""
        self.epoch += 1

    async def passage(self) -> int:
        """Wait while the fence is closed; the epoch it opened in."""
        await self._open.wait()
        return self.epoch
