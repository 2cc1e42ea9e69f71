"""``download_delay`` holds where it is observed: at the server, under a stalled loop.

The server is a child process, so that the crawler's stalls (a callback that blocks
the loop for 100 ms) do not shift the arrival times it records.
With two requests in flight per host and a 50 ms delay, no two requests may arrive
closer than the delay; 2 ms are allowed for clock granularity and the server's own
scheduling between the socket read and the handler.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from netdisco import Crawler, Response, Settings, Spider

DELAY = 0.05
TOLERANCE = 0.002
PAGES = 30


#: the server, run as a child process that records the kernel's receive time of each
#: request: neither the crawler's stalls, nor its hold on the GIL, nor the scheduling of
#: a loaded machine shift the times it records
SERVER = r"""
import asyncio, json, socket, struct, sys, time
PAGES = int(sys.argv[1])
LINKS = "".join(f'<a href="/p/{n}">{n}</a>' for n in range(PAGES))
SO_TIMESTAMPNS = 35  # Linux: the kernel stamps each segment as it arrives
arrivals = []

def answer(sock, body):
    head = f"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: {len(body)}\r\n\r\n"
    try:
        sock.sendall(head.encode() + body)
    except OSError:
        pass

def readable(loop, sock, state):
    # a minimal HTTP/1.1 server (GETs, keep-alive); a request's arrival is the kernel's
    # receive time of its bytes, so neither this process's scheduling nor the parsing
    # delay it
    try:
        data, ancdata, _, _ = sock.recvmsg(65536, socket.CMSG_SPACE(16))
    except (BlockingIOError, InterruptedError):
        return
    except OSError:
        data = b""
    if not data:
        loop.remove_reader(sock)
        sock.close()
        return
    stamps = [struct.unpack("qq", d[:16]) for _, kind, d in ancdata if kind == SO_TIMESTAMPNS]
    at = stamps[0][0] + stamps[0][1] / 1e9 if stamps else time.time()  # the same clock
    state[0] += data
    while b"\r\n\r\n" in state[0]:
        head, state[0] = state[0].split(b"\r\n\r\n", 1)
        path = head.split(b" ", 2)[1].decode()
        if path == "/__arrivals":
            answer(sock, json.dumps(arrivals).encode())
            continue
        arrivals.append(at)
        body = f"<html><body>{LINKS if path == '/' else 'page'}</body></html>".encode()
        loop.call_later(0.02, answer, sock, body)

def accept(loop, server):
    conn, _ = server.accept()
    conn.setblocking(False)
    conn.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    loop.add_reader(conn, readable, loop, conn, [b""])

async def main():
    loop = asyncio.get_running_loop()
    server = socket.create_server(("127.0.0.1", 0))
    server.setblocking(False)
    server.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)  # inherited: the first bytes too
    loop.add_reader(server, accept, loop, server)
    print(server.getsockname()[1], flush=True)
    await asyncio.Event().wait()
asyncio.run(main())
"""


class ChildSite:
    """``/`` links to ``/p/0`` .. ``/p/N``; each answer takes 20 ms; ``arrivals()`` are
    the kernel's receive times (wall clock) of the requests, as the server saw them."""

    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-c", SERVER, str(PAGES)], stdout=subprocess.PIPE, text=True
        )
        assert self.process.stdout is not None
        self.base = f"http://127.0.0.1:{int(self.process.stdout.readline())}"

    def arrivals(self) -> list[float]:
        with urllib.request.urlopen(self.base + "/__arrivals", timeout=10) as answer:
            times: list[float] = json.load(answer)
        return sorted(times)

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)
        if self.process.stdout is not None:  # else its pipe is closed by the GC, mid-test
            self.process.stdout.close()


class Stalling(Spider):
    """Follows every link; every third page blocks the loop for 100 ms (a big parse)."""

    name = "stalling"

    def __init__(self, base: str) -> None:
        super().__init__()
        self.start_urls = [base + "/"]  # type: ignore[misc]

    def parse(self, response: Response) -> Iterator[Any]:
        if response.url.endswith(("0", "3", "6")):
            time.sleep(0.1)  # the stall is the point
        yield from response.follow_all(css="a", callback=self.parse)
        yield {"url": response.url}


@pytest.fixture
def child_site() -> Iterator[ChildSite]:
    site = ChildSite()
    yield site
    site.stop()


async def test_no_two_starts_closer_than_the_delay_under_a_stalled_loop(
    child_site: ChildSite,
) -> None:
    settings = Settings(
        concurrency=4, per_host_concurrency=2, download_delay=DELAY, obey_robots=False
    )
    stats = await Crawler(Stalling(child_site.base), settings).run()
    assert stats.succeeded == PAGES + 1
    times = await asyncio.to_thread(child_site.arrivals)
    gaps = [later - earlier for earlier, later in itertools.pairwise(times)]
    close = [round(gap * 1000, 1) for gap in gaps if gap < DELAY - TOLERANCE]
    assert close == [], f"{len(close)} pairs of starts closer than {DELAY * 1000:.0f} ms"
