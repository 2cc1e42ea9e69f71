"""The one bridge between kazoo's threads and asyncio.

kazoo runs state listeners and watch callbacks on its own threads; calling kazoo
from there wedges the client (kazoo #355, #381). So kazoo threads only ever call
``loop.call_soon_threadsafe``; every ZooKeeper operation is a ``*_async`` call
whose result is awaited on the loop. See ``docs/architecture.md``, "The kazoo rule".
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from kazoo.client import KazooClient
from kazoo.protocol.states import KazooState, WatchedEvent

T = TypeVar("T")

#: Marks kazoo's threads. Thread-local, so it dies with the thread: thread ids are
#: recycled at once on Linux, so a set of ids would flag later, unrelated threads.
_thread_mark = threading.local()


def on_kazoo_thread() -> bool:
    """True when running on one of kazoo's callback threads."""
    return bool(getattr(_thread_mark, "kazoo", False))


def _mark_kazoo_thread() -> None:
    _thread_mark.kazoo = True


async def wait_result(async_result: Any) -> Any:
    """Await a kazoo ``IAsyncResult`` on the running loop.

    The result is settled on the loop: kazoo's thread only schedules the hand-over.
    """
    loop = asyncio.get_running_loop()
    future: asyncio.Future[Any] = loop.create_future()

    def settle(result: Any) -> None:
        if future.done():
            return
        try:
            future.set_result(result.get_nowait())
        except BaseException as exc:  # handed to the awaiting task, whatever it is
            future.set_exception(exc)

    caller = threading.get_ident()

    def on_kazoo(result: Any) -> None:
        if threading.get_ident() != caller:  # a client already stopped calls back at once,
            _mark_kazoo_thread()  # on the loop's own thread: that thread is not kazoo's
        loop.call_soon_threadsafe(settle, result)

    async_result.rawlink(on_kazoo)
    return await future


class Bridge:
    """Turns kazoo's state changes and watches into asyncio events and callbacks.

    ``state_listener`` and ``watcher`` return functions that are safe to hand to
    kazoo: they only schedule ``callback`` on the loop.
    """

    def __init__(self, client: KazooClient, loop: asyncio.AbstractEventLoop) -> None:
        self.client = client
        self.loop = loop

    def state_listener(self, callback: Callable[[KazooState], None]) -> Callable[[Any], bool]:
        """A kazoo state listener that forwards each state to ``callback`` on the loop."""

        def listener(state: KazooState) -> bool:
            _mark_kazoo_thread()
            self.loop.call_soon_threadsafe(callback, state)
            return False  # keep listening

        return listener

    def watcher(self, callback: Callable[[WatchedEvent], None]) -> Callable[[WatchedEvent], None]:
        """A one-shot kazoo watch function that forwards the event to the loop."""

        def watch(event: WatchedEvent) -> None:
            _mark_kazoo_thread()
            self.loop.call_soon_threadsafe(callback, event)

        return watch

    def add_listener(self, callback: Callable[[KazooState], None]) -> None:
        """Register ``callback`` for every connection-state change."""
        self.client.add_listener(self.state_listener(callback))


def close_client(client: KazooClient) -> None:
    """Close the session (the server drops our ephemerals) and free kazoo's threads.

    Blocking: run it with ``asyncio.to_thread``.
    """
    try:
        client.stop()
    finally:
        client.close()
