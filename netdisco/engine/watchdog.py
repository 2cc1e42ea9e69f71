"""Notice a stuck event loop: a heartbeat on the loop, a watchdog thread beside it.

A loop blocked by a callback (``time.sleep``, a CPU-bound parse) cannot measure itself,
and kazoo's own thread keeps the engine's session and znode alive meanwhile, so the
cluster would see a healthy engine doing nothing. So the loop writes a heartbeat
(``monotonic`` time) every ``interval`` and measures its own lag (how late each beat
woke); a plain thread reads the heartbeat. Past ``stall`` seconds without one it
calls ``on_stall`` (the engine marks its znode stalled, from this thread); past
``drop`` it calls ``on_drop`` (the engine gives up its znode). When the loop runs
again, ``on_back`` runs on the loop one beat later (so that requests that waited out
the stall are still answered as stalled) and the engine writes its data again.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable

import structlog

from netdisco._tasks import in_own_thread

log = structlog.get_logger(__name__)


class LoopWatchdog:
    """The heartbeat task and the watchdog thread of one engine; see the module."""

    def __init__(
        self,
        stall: float,
        drop: float,
        *,
        on_stall: Callable[[float], None],
        on_drop: Callable[[], None],
        on_back: Callable[[float], None],
    ) -> None:
        self.stall = stall
        self.drop = drop
        self.interval = min(0.5, stall / 4)
        self.stalled = False  # set by the thread, cleared on the loop
        self.lag = 0.0  # seconds: the last measured lag (while stalled, the silence so far)
        self._dropped = False
        self._on_stall, self._on_drop, self._on_back = on_stall, on_drop, on_back
        self._beat = time.monotonic()
        self._done = threading.Event()
        self._thread: threading.Thread | None = None
        self._task: asyncio.Task[None] | None = None
        self._recovering = False

    def start(self) -> None:
        """Start the heartbeat on the running loop and the thread."""
        self._beat = time.monotonic()
        self._task = asyncio.get_running_loop().create_task(self._heartbeat(), name="heartbeat")
        self._thread = threading.Thread(target=self._watch, name="loop-watchdog", daemon=True)
        self._thread.start()

    async def stop(self) -> None:
        """Stop both; the thread ends within one interval."""
        self._done.set()
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if self._thread is not None:
            await in_own_thread(self._thread.join, "loop-watchdog-join")

    async def _heartbeat(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            before = time.monotonic()
            await asyncio.sleep(self.interval)
            now = time.monotonic()
            late = max(now - before - self.interval, 0.0)
            self._beat = now
            if self.stalled and not self._recovering:
                self._recovering = True
                loop.call_later(self.interval, self._back, max(late, self.lag))
            elif not self.stalled:
                self.lag = round(late, 3)

    def _back(self, lag: float) -> None:
        """On the loop, one beat after it came back."""
        self.stalled = self._dropped = self._recovering = False
        self.lag = round(lag, 3)
        log.warning("loop_recovered", lag=self.lag)
        self._on_back(lag)

    def _watch(self) -> None:
        """The thread: never touches the loop or its objects, only the heartbeat."""
        while not self._done.wait(self.interval):
            silent = time.monotonic() - self._beat
            if silent < self.stall:
                continue
            if not self.stalled:
                self.stalled = True
                log.error("loop_stalled", seconds=round(silent, 3))
                self._call(self._on_stall, silent)
            self.lag = round(silent, 3)
            if self.drop and silent >= self.drop and not self._dropped:
                self._dropped = True
                log.error("loop_stalled_dropping_node", seconds=round(silent, 3))
                self._call(self._on_drop)

    @staticmethod
    def _call(callback: Callable[..., None], *args: float) -> None:
        try:
            callback(*args)
        except Exception:  # the watchdog must outlive a failing callback
            log.exception("loop_watchdog_callback_failed")
