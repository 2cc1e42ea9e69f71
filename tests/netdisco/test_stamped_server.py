"""The stamping server the politeness tests count at (``hosts_support.served``): it
stamps a request with the kernel's receive time, and a client that dies mid-request
(a ``kill -9`` resets its connections) ends only its own conversation."""

from __future__ import annotations

import asyncio
import socket
import struct
import time

import aiohttp

from tests.netdisco.hosts_support import LoggingHost, served


async def test_a_reset_connection_ends_quietly_and_others_are_served() -> None:
    site = LoggingHost(latency=0.0)
    async with served(site) as base:
        host, port = base.removeprefix("http://").split(":")
        for request in (b"GET /p1.ht", b"GET /p2.html HTTP/1.1\r\nHost: x\r\n\r\n"):
            sock = socket.create_connection((host, int(port)))
            sock.sendall(request)
            await asyncio.sleep(0)  # the server reads it (or not: both must be fine)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            sock.close()  # linger 0: a reset, as a killed process's socket
        before = time.time()
        async with aiohttp.ClientSession() as session, session.get(f"{base}/p1.html") as answer:
            assert answer.status == 200
            assert '<a href="/p3.html">' in await answer.text()
    visit = next(v for v in site.visits if v.path == "/p1.html")
    assert before <= visit.start <= visit.end  # the kernel's stamp, on the system clock
