"""Tasks with an owner: what an object starts, its stop cancels and awaits.

``asyncio.TaskGroup`` owns the tasks of one block (a crawl's workers); a daemon's
tasks live as long as an object (an engine, its status process, a robots.txt
cache), so each such object keeps them in one ``Tasks``: started with ``spawn``,
forgotten when they end, and every one still running cancelled and awaited by
``cancel_all``, so a stop ends exactly what was started.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import Callable, Coroutine, Iterator
from functools import partial
from typing import Any, TypeVar

T = TypeVar("T")


class Tasks:
    """The running tasks of one owner; see the module docstring."""

    def __init__(self) -> None:
        self._running: set[asyncio.Task[Any]] = set()

    def __len__(self) -> int:
        return len(self._running)

    def __iter__(self) -> Iterator[asyncio.Task[Any]]:
        return iter(list(self._running))

    def spawn(
        self,
        coro: Coroutine[Any, Any, T],
        *,
        name: str | None = None,
        context: contextvars.Context | None = None,
    ) -> asyncio.Task[T]:
        """Run ``coro`` as a task of this owner, kept until it ends."""
        task = asyncio.create_task(coro, name=name, context=context)
        self._running.add(task)
        task.add_done_callback(self._running.discard)
        return task

    async def cancel_all(self, timeout: float | None = None) -> set[asyncio.Task[Any]]:
        """Cancel every task still running and await them (``timeout`` s at most); the
        ones that outlived it (a task that swallows its cancellation)."""
        tasks = set(self._running)
        for task in tasks:
            task.cancel()
        if not tasks:
            return set()
        _, late = await asyncio.wait(tasks, timeout=timeout)
        return late


async def wait_event(event: asyncio.Event, timeout: float) -> bool:
    """Wait for ``event`` at most ``timeout`` s; True if it was set.

    Not ``asyncio.wait_for``: on Python 3.11 a cancellation that arrives as the event is
    set is swallowed by it, so a loop that waits this way never ends on ``cancel()``
    (a monitor's stop hung so). ``asyncio.timeout`` passes the cancellation on.
    """
    try:
        async with asyncio.timeout(timeout):
            await event.wait()
    except TimeoutError:
        return False
    return True


async def in_own_thread(func: Callable[[], T], name: str) -> T:
    """``func()`` in a thread of its own that ends with it; its result, awaited.

    For the blocking calls of a stop (closing a kazoo client, joining a thread):
    ``asyncio.to_thread`` would leave a worker in the loop's default executor, which a
    host application's loop may never shut down (aiohttp's ``web.run_app`` does not),
    so an embedded engine would leave a thread behind.
    """
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()

    def settle(outcome: Callable[[], None]) -> None:
        if not future.done():
            outcome()

    def work() -> None:
        try:
            result = func()
        except BaseException as exc:  # handed to the awaiting task, raised there
            loop.call_soon_threadsafe(settle, partial(future.set_exception, exc))
        else:
            loop.call_soon_threadsafe(settle, partial(future.set_result, result))

    thread = threading.Thread(target=work, name=name, daemon=True)
    thread.start()
    try:
        return await asyncio.shield(future)
    finally:
        if future.done():
            thread.join()  # it has handed its result over: it is ending, at once
