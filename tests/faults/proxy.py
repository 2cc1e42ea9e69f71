"""A TCP proxy on loopback that delays, or cuts, the bytes between clients and a server.

It runs its own asyncio loop on a thread, so sync and async callers alike can use
it. ``delay`` is added to every chunk in each direction (so a request and its reply
take ``2 * delay`` more), order kept. ``cut()`` is a partition: from then on bytes of
the connections open at that moment are dropped (their peers see silence, not a
close), and new connections are accepted but forwarded nowhere until ``heal()``.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from typing import Self


class DelayProxy:
    def __init__(self, target_host: str, target_port: int, *, delay: float = 0.0) -> None:
        self.target = (target_host, target_port)
        self.delay = delay
        self.host = "127.0.0.1"
        self.port = 0
        self._cut = False
        self._epoch = 0  # a connection forwards only while the epoch it was opened in lasts
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def hosts(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self) -> Self:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._listen(), self._loop).result(10)
        return self

    def cut(self) -> None:
        self._cut = True
        self._epoch += 1

    def heal(self) -> None:
        self._cut = False

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self._close(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    async def _listen(self) -> None:
        self._server = await asyncio.start_server(self._accept, self.host, 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _close(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        epoch = self._epoch
        try:
            if self._cut:  # partitioned: accept, then say nothing
                await reader.read()
                return
            up_reader, up_writer = await asyncio.open_connection(*self.target)
            await asyncio.gather(
                self._pipe(reader, up_writer, epoch), self._pipe(up_reader, writer, epoch)
            )
        except (OSError, asyncio.CancelledError):
            pass
        finally:
            writer.close()
            self._tasks.discard(task)

    async def _pipe(self, src: asyncio.StreamReader, dst: asyncio.StreamWriter, epoch: int) -> None:
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()
        sender = asyncio.create_task(self._send(queue, dst))
        try:
            while data := await src.read(65536):
                if epoch == self._epoch:
                    queue.put_nowait((asyncio.get_running_loop().time() + self.delay, data))
        finally:
            await queue.put((0.0, b""))
            with contextlib.suppress(OSError, asyncio.CancelledError):
                await sender
            dst.close()

    async def _send(
        self, queue: asyncio.Queue[tuple[float, bytes]], dst: asyncio.StreamWriter
    ) -> None:
        loop = asyncio.get_running_loop()
        while True:
            due, data = await queue.get()
            if not data:
                return
            await asyncio.sleep(max(0.0, due - loop.time()))
            dst.write(data)
            await dst.drain()
