"""Every HTTP server of netdisco binds here, with bounded connections.

The engine's endpoint, its status process and the monitor each serve aiohttp on
a TCP port that anyone who can reach it may open connections to. Unbounded, a
few thousand half-open connections (slowloris) use up the process's descriptors,
and then the status route, ZooKeeper and the crawl itself fail. So:

* a connection that has not sent a complete request within :data:`IDLE_TIMEOUT`
  seconds (headers dripping in, or idle between keep-alive requests) is closed
  (aiohttp's keep-alive timer, which also runs from the accept);
* beyond :func:`connection_cap` open connections (below the descriptor limit), a
  new one gets ``503`` and is closed at once, so the descriptors the process
  needs for everything else stay free.
"""

from __future__ import annotations

import asyncio
import resource
from collections.abc import Callable
from typing import Any

from aiohttp import web

#: seconds a connection may stay open without a complete request (headers, keep-alive)
IDLE_TIMEOUT = 15.0

#: the answer to a connection beyond the cap, written before it is closed
BUSY = (
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\n"
    b"Content-Length: 22\r\nConnection: close\r\nRetry-After: 1\r\n\r\n"
    b"too many connections\r\n"
)


def connection_cap() -> int:
    """Half the soft descriptor limit, at most 4,096: the other half stays for the work."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    limit = soft if soft != resource.RLIM_INFINITY else 8192
    return max(16, min(4096, limit // 2))


def runner(app: web.Application, **options: Any) -> web.AppRunner:
    """An ``AppRunner`` whose connections close after :data:`IDLE_TIMEOUT` without a request."""
    return web.AppRunner(app, keepalive_timeout=IDLE_TIMEOUT, **options)


class _Busy(asyncio.Protocol):
    """A connection over the cap: ``503`` and closed, before any byte of it is read."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.WriteTransport)
        transport.write(BUSY)
        transport.close()


def _factory(server: web.Server, cap: int) -> Callable[[], asyncio.Protocol]:
    def make() -> asyncio.Protocol:
        return _Busy() if len(server.connections) >= cap else server()

    return make


class BoundedSite(web.TCPSite):
    """A ``TCPSite`` that answers ``503`` beyond ``cap`` open connections."""

    def __init__(
        self, app_runner: web.AppRunner, host: str, port: int, cap: int | None = None
    ) -> None:
        super().__init__(app_runner, host, port, backlog=1024)
        self.cap = connection_cap() if cap is None else cap

    async def start(self) -> None:
        await web.BaseSite.start(self)  # registers the site with its runner
        server = self._runner.server
        assert server is not None
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            _factory(server, self.cap),
            self._host,
            self._port,
            backlog=self._backlog,
            reuse_address=self._reuse_address,
            reuse_port=self._reuse_port,
        )
        sockets = self._server.sockets
        self._bound_port = sockets[0].getsockname()[1] if sockets else self._port
