"""Several hosts on loopback (127.0.0.1, .2, .3...) that log every request's start and
end at the server (its start as the kernel received it), and an engine process that
crawls them on a shared Redis crawl.

Usage: python -m tests.netdisco.hosts_support REDIS_URL DELAY PER_HOST BASE [BASE...]
(prints "ready" and its frontier's owner, crawls on a "go" line, stops gracefully on a
"stop" line, then prints its stats as JSON). With
``HOSTS_ITEMS`` set in its environment, an engine writes its items there (JSON lines).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import re
import socket
import struct
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import structlog

from netdisco import Crawler, Response, Settings, Spider
from netdisco.crawl.feeds.spec import parse_feeds

#: pages per host: page n links to 2n+1 and 2n+2, a tree from /p0.html
PAGES = 24
#: robots.txt disallows one leaf page, so a crawl fetches PAGES - 1 pages a host
ROBOTS = "User-agent: *\nDisallow: /p23.html\n"


@dataclass
class Visit:
    """One request as the server saw it, on the system clock (``time.time``): ``start``
    is when the kernel received its first bytes (``SO_TIMESTAMPNS``), so a server
    process that its scheduler or its loop holds back cannot move it; ``end`` is taken
    just before the answer is written."""

    path: str
    start: float
    end: float = 0.0
    status: int = 200


#: an answer: status, headers, body
Answer = tuple[int, dict[str, str], bytes]


@dataclass
class LoggingHost:
    """A site on one loopback address that records what it served, and when
    (``served``)."""

    latency: float
    pages: int = PAGES
    visited: Callable[[], None] = lambda: None  # told of every page request's start
    throttle: dict[str, float] = field(default_factory=dict)  # path -> Retry-After, once
    redirects: dict[str, str] = field(default_factory=dict)  # path -> Location (a 302)
    visits: list[Visit] = field(default_factory=list)
    robots_fetches: int = 0
    robots_visits: list[Visit] = field(default_factory=list)

    async def answer(self, path: str, arrived: float) -> Answer:
        """What the site answers a GET of ``path`` that arrived at ``arrived``."""
        if path == "/robots.txt":
            return await self.robots(path, arrived)
        if re.fullmatch(r"/p[0-9]+\.html", path):
            return await self.handle(path, arrived)
        return 404, {}, b""

    async def robots(self, path: str, arrived: float) -> Answer:
        """Not a page: counted apart (``robots_visits``), fetched inside a page's slot."""
        self.robots_fetches += 1
        visit = Visit(path, arrived)
        self.robots_visits.append(visit)
        await asyncio.sleep(self.latency)
        visit.end = time.time()
        return 200, {"Content-Type": "text/plain"}, ROBOTS.encode()

    async def handle(self, path: str, arrived: float) -> Answer:
        visit = Visit(path, arrived)
        self.visits.append(visit)
        self.visited()
        await asyncio.sleep(self.latency)
        wait = self.throttle.pop(path, None)
        if wait is not None:
            visit.status, visit.end = 429, time.time()
            return 429, {"Retry-After": str(wait)}, b""
        if path in self.redirects:
            visit.status, visit.end = 302, time.time()
            return 302, {"Location": self.redirects[path]}, b""
        number = int(path[2:-5])  # /p<n>.html
        links = "".join(
            f'<a href="/p{n}.html">{n}</a>'
            for n in (2 * number + 1, 2 * number + 2)
            if n < self.pages
        )
        visit.end = time.time()
        body = f"<html><body>{links}</body></html>".encode()
        return 200, {"Content-Type": "text/html; charset=utf-8"}, body


#: the kernel's receive time of a socket's data, as a ``struct timespec``
_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)
_STAMP = struct.Struct("qq")
_REASONS = {200: "OK", 302: "Found", 404: "Not Found", 429: "Too Many Requests"}


async def _readable(loop: asyncio.AbstractEventLoop, sock: socket.socket) -> None:
    readable: asyncio.Future[None] = loop.create_future()

    def ready() -> None:
        if not readable.done():
            readable.set_result(None)

    loop.add_reader(sock, ready)
    try:
        await readable
    finally:
        loop.remove_reader(sock)


async def _receive(sock: socket.socket) -> tuple[bytes, float | None]:
    """The next bytes on ``sock`` and when the kernel received them (None at the end
    of the stream, or while the kernel stamps nothing yet)."""
    loop = asyncio.get_running_loop()
    while True:
        try:
            data, ancillary, _, _ = sock.recvmsg(65536, socket.CMSG_SPACE(_STAMP.size))
        except BlockingIOError:
            await _readable(loop, sock)
            continue
        except ConnectionError:  # a client killed (kill -9): its connection is reset
            return b"", None
        for level, kind, value in ancillary:
            if level == socket.SOL_SOCKET and kind == _TIMESTAMPNS:
                seconds, nanos = _STAMP.unpack(value[: _STAMP.size])
                return data, seconds + nanos / 1e9
        return data, None


async def _converse(site: LoggingHost, sock: socket.socket) -> None:
    """One connection: HTTP/1.1 GETs, kept alive; a request's arrival is the kernel's
    stamp of the bytes that began it."""
    loop = asyncio.get_running_loop()
    buffer, arrived = b"", 0.0
    with sock:
        while True:
            data, stamp = await _receive(sock)
            if not data:
                return
            if stamp is None:
                raise AssertionError("the kernel stamped no request: SO_TIMESTAMPNS is off")
            if not buffer:
                arrived = stamp
            buffer += data
            while (end := buffer.find(b"\r\n\r\n")) >= 0:
                head, buffer = buffer[:end].decode("latin-1"), buffer[end + 4 :]
                method, target, _ = head.split("\r\n", 1)[0].split(" ", 2)
                assert method == "GET", head  # a GET, with no body
                assert "content-length:" not in head.lower(), head
                status, headers, body = await site.answer(urlsplit(target).path, arrived)
                lines = [f"HTTP/1.1 {status} {_REASONS[status]}", f"Content-Length: {len(body)}"]
                lines += [f"{name}: {value}" for name, value in headers.items()]
                answer = "\r\n".join(lines).encode() + b"\r\n\r\n" + body
                try:
                    await loop.sock_sendall(sock, answer)
                except ConnectionError:  # the client went away while its answer was due
                    return
                arrived = stamp  # what is left of the buffer came with these bytes


async def _stamping(listener: socket.socket) -> None:
    """Wait until the kernel stamps what arrives: enabling it may take effect a little
    later (a deferred switch), and an unstamped request would be an error."""
    loop = asyncio.get_running_loop()
    for _ in range(200):
        with socket.create_connection(listener.getsockname()) as client:
            sock, _ = await loop.sock_accept(listener)
            with sock:
                sock.setblocking(False)
                client.sendall(b"x")
                _, stamp = await _receive(sock)
        if stamp is not None:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the kernel stamps no received data (SO_TIMESTAMPNS)")


@contextlib.asynccontextmanager
async def served(site: LoggingHost, address: str = "127.0.0.1") -> AsyncIterator[str]:
    """Serve ``site`` on a free port of ``address`` in this loop; yields its base URL."""
    loop = asyncio.get_running_loop()
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, _TIMESTAMPNS, 1)  # accepted sockets inherit it
    listener.bind((address, 0))
    listener.listen(128)
    listener.setblocking(False)
    conversations: set[asyncio.Task[None]] = set()
    broken: list[BaseException] = []  # a conversation's error fails the test at the end

    def ended(task: asyncio.Task[None]) -> None:
        conversations.discard(task)
        if not task.cancelled() and (error := task.exception()) is not None:
            broken.append(error)

    async def accept() -> None:
        while True:
            sock, _ = await loop.sock_accept(listener)
            sock.setblocking(False)
            task = asyncio.create_task(_converse(site, sock))
            conversations.add(task)
            task.add_done_callback(ended)

    with listener:
        await _stamping(listener)
        acceptor = asyncio.create_task(accept())
        try:
            yield f"http://{address}:{listener.getsockname()[1]}"
        finally:
            for task in (acceptor, *conversations):
                task.cancel()
            await asyncio.gather(acceptor, *conversations, return_exceptions=True)
    if broken:
        raise broken[0]


def most_in_flight(visits: list[Visit]) -> int:
    """The most requests the server had open at once (an end before a start at a tie)."""
    events = sorted([(v.start, 1) for v in visits] + [(v.end, -1) for v in visits])
    most = now = 0
    for _, step in events:
        now += step
        most = max(most, now)
    return most


def closest_starts(visits: list[Visit]) -> float:
    """The shortest time between two request starts at the server."""
    return closest_pair(visits)[0]


def closest_pair(visits: list[Visit]) -> tuple[float, list[Visit]]:
    """The shortest time between two request starts at the server, and those two
    visits (what a failed assertion shows)."""
    ordered = sorted(visits, key=lambda v: v.start)
    pairs = [(b.start - a.start, [a, b]) for a, b in itertools.pairwise(ordered)]
    return min(pairs, key=lambda pair: pair[0], default=(float("inf"), []))


def reachable(pages: int) -> set[str]:
    """The pages a crawl of one host fetches: the tree from /p0.html, less the page
    robots.txt disallows and what only it links to."""
    found, todo = set(), [0]
    while todo:
        number = todo.pop()
        if number < pages and number != 23:
            found.add(f"/p{number}.html")
            todo += [2 * number + 1, 2 * number + 2]
    return found


@contextlib.asynccontextmanager
async def hosts(
    addresses: Sequence[str],
    latency: float,
    pages: int = PAGES,
    visited: Callable[[], None] = lambda: None,
) -> AsyncIterator[list[tuple[str, LoggingHost]]]:
    """One logging host on each loopback address: (base URL, host) pairs."""
    sites = [LoggingHost(latency, pages, visited) for _ in addresses]
    async with contextlib.AsyncExitStack() as stack:
        bases = [
            await stack.enter_async_context(served(s, a))
            for s, a in zip(sites, addresses, strict=True)
        ]
        yield list(zip(bases, sites, strict=True))


async def start_engines(
    count: int, url: str, delay: float, per_host: int, bases: list[str], items: Path | None = None
) -> list[asyncio.subprocess.Process]:
    """``count`` engine processes (this module), all ready, then all told to go at once;
    with ``items``, engine n writes its items to ``items/engine-n.jsonl``."""
    procs = []
    for n in range(count):
        out = None if items is None else items / f"engine-{n}.jsonl"
        procs.append(await spawn(url, delay, per_host, bases, out))
    for proc in procs:
        await ready(proc)
    for proc in procs:
        await tell(proc, "go")
    return procs


async def spawn(
    url: str, delay: float, per_host: int, bases: list[str], items: Path | None = None
) -> asyncio.subprocess.Process:
    """One engine process (this module); with ``items``, it writes its items there."""
    argv = ["-m", "tests.netdisco.hosts_support", url, str(delay), str(per_host), *bases]
    env = {**os.environ}
    if items is not None:
        env["HOSTS_ITEMS"] = str(items)
    pipe = asyncio.subprocess.PIPE
    return await asyncio.create_subprocess_exec(
        sys.executable, *argv, env=env, stdin=pipe, stdout=pipe
    )


async def ready(proc: asyncio.subprocess.Process) -> str:
    """Wait for an engine to be ready; its frontier's owner (its leases' name)."""
    assert proc.stdout is not None
    word, _, owner = (await proc.stdout.readline()).decode().strip().partition(" ")
    assert word == "ready"
    return owner


async def tell(proc: asyncio.subprocess.Process, line: str) -> None:
    """Send an engine a line: ``go`` or ``stop``."""
    assert proc.stdin is not None
    proc.stdin.write(f"{line}\n".encode())
    await proc.stdin.drain()


async def results(procs: list[asyncio.subprocess.Process]) -> list[dict[str, Any]]:
    """What each engine reported (its last line, JSON), once it ended."""
    found = []
    for proc in procs:
        out, _ = await asyncio.wait_for(proc.communicate(), 300)
        found.append(json.loads(out.splitlines()[-1]))
    return found


class HostsSpider(Spider):
    """Follows every link; one item per page."""

    name = "hosts"

    def parse(self, response: Response) -> Iterator[Any]:
        yield {"url": response.url}
        for href in response.css("a::attr(href)").getall():
            yield response.follow(href, callback=self.parse)


async def engine(
    redis_url: str, delay: float, per_host: int, bases: list[str], items: str = ""
) -> dict[str, Any]:
    """One engine: its own Crawler and Redis frontier, on the shared crawl."""
    # warnings to stderr (pytest shows them with a failure); stdout carries the result
    structlog.configure(
        wrapper_class=structlog.make_filtering_bound_logger(30),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
    )
    spider = HostsSpider(start_urls=[f"{base}/p0.html" for base in bases])
    settings = Settings(
        frontier=redis_url,
        concurrency=8,
        per_host_concurrency=per_host,
        download_delay=delay,
        obey_robots=True,
        progress_interval=0,
        retry_backoff=0.05,
        feeds=parse_feeds("feeds", {items: {}}) if items else (),
    )
    crawler = Crawler(spider, settings)
    lines = asyncio.StreamReader()  # read on the loop: no thread outlives the crawl
    protocol = asyncio.StreamReaderProtocol(lines)
    await asyncio.get_running_loop().connect_read_pipe(lambda: protocol, sys.stdin)
    print("ready", getattr(crawler.frontier, "owner", ""), flush=True)
    await lines.readline()
    stopper = asyncio.create_task(_stop_when_told(crawler, lines))
    stats = await crawler.run()
    stopper.cancel()
    return {"state": crawler.state.value, "pages": stats.succeeded, "retried": stats.retried}


async def _stop_when_told(crawler: Crawler, lines: asyncio.StreamReader) -> None:
    """A "stop" line on stdin: a graceful stop (its leases handed back)."""
    if (await lines.readline()).strip() == b"stop":
        await crawler.stop()


if __name__ == "__main__":
    redis_url, delay, per_host, *bases = sys.argv[1:]
    items = os.environ.get("HOSTS_ITEMS", "")
    result = asyncio.run(engine(redis_url, float(delay), int(per_host), bases, items))
    print(json.dumps(result), flush=True)
