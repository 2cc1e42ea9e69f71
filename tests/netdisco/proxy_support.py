"""A TCP proxy in front of Redis that stalls like a cut link (the frontier's outage
tests and the ownership's cut-engine test)."""

from __future__ import annotations

import asyncio

from netdisco.testing import free_port


class StallingProxy:
    """A TCP proxy in front of Redis whose ``stall`` acts as a cut link: bytes on the
    connections open then are never delivered (as when TCP's retransmission backoff
    outlasts the cut), and new connections are refused until ``mend``."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.port = free_port()
        self.refusing = False
        self.stalled: set[asyncio.StreamWriter] = set()
        self.open: set[asyncio.StreamWriter] = set()
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", self.port)

    def stall(self) -> None:
        self.refusing = True
        self.stalled |= self.open

    def mend(self) -> None:
        self.refusing = False

    async def close(self) -> None:
        assert self._server is not None
        self._server.close()
        for writer in self.open:
            writer.close()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.refusing:
            writer.close()
            return
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        self.open |= {writer, up_writer}
        for source, sink, pair in ((reader, up_writer, writer), (up_reader, writer, up_writer)):
            task = asyncio.create_task(self._pump(source, sink, pair))
            self._tasks.add(task)

    async def _pump(
        self, source: asyncio.StreamReader, sink: asyncio.StreamWriter, mine: asyncio.StreamWriter
    ) -> None:
        while data := await source.read(65536):
            if mine in self.stalled or sink in self.stalled:
                continue  # a cut link: nothing gets through, nothing says so
            sink.write(data)
            await sink.drain()
        sink.close()
