"""A hook's own bounded set of threads, so a hung sync hook harms nobody else.

``asyncio.to_thread`` would use the loop's default executor, which the state file
and the ZooKeeper client also need: a hook that never returns would starve them,
and ``asyncio.run`` would wait for it at exit. Here each call gets a daemon
thread, at most ``size`` at once; a call whose caller gave up (a timeout) keeps
its slot until its thread really ends, so hung calls cannot pile up threads.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable
from typing import Any


class HookThreads:
    """Runs sync calls on daemon threads, at most ``size`` at a time."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.busy = 0  # threads running now, hung ones included
        self._slots: asyncio.Semaphore | None = None

    async def run(self, func: Callable[..., Any], *args: Any) -> Any:
        """``func(*args)`` on a thread of its own; waits for a free slot first."""
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.size)
        await self._slots.acquire()
        self.busy += 1
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        slots = self._slots

        def finish(value: Any, error: BaseException | None) -> None:
            slots.release()
            self.busy -= 1
            if future.done():  # the caller stopped waiting
                return
            if error is None:
                future.set_result(value)
            else:
                future.set_exception(error)

        def work() -> None:
            try:
                value, error = func(*args), None
            except BaseException as exc:  # handed to the caller, who decides
                value, error = None, exc
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits
                loop.call_soon_threadsafe(finish, value, error)

        threading.Thread(target=work, name=f"hook-{func.__name__}", daemon=True).start()
        return await future
