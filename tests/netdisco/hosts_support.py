"""Several hosts on loopback (127.0.0.1, .2, .3...) that log every request's start and
end at the server, and an engine process that crawls them through host queues.

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
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog
from aiohttp import web

from netdisco import Crawler, Response, Settings, Spider
from netdisco.crawl.feeds.spec import parse_feeds
from netdisco.testing import serve

#: pages per host: page n links to 2n+1 and 2n+2, a tree from /p0.html
PAGES = 24
#: robots.txt disallows one leaf page, so a crawl fetches PAGES - 1 pages a host
ROBOTS = "User-agent: *\nDisallow: /p23.html\n"


@dataclass
class Visit:
    """One request as the server saw it (``time.monotonic``, the server's clock)."""

    path: str
    start: float
    end: float = 0.0
    status: int = 200


@dataclass
class LoggingHost:
    """A site on one loopback address that records what it served, and when."""

    latency: float
    pages: int = PAGES
    visited: Callable[[], None] = lambda: None  # told of every page request's start
    throttle: dict[str, float] = field(default_factory=dict)  # path -> Retry-After, once
    redirects: dict[str, str] = field(default_factory=dict)  # path -> Location (a 302)
    visits: list[Visit] = field(default_factory=list)
    robots_fetches: int = 0
    robots_visits: list[Visit] = field(default_factory=list)

    async def robots(self, request: web.Request) -> web.Response:
        """Not a page: counted apart (``robots_visits``), fetched inside a page's slot."""
        self.robots_fetches += 1
        visit = Visit(request.path, time.monotonic())
        self.robots_visits.append(visit)
        await asyncio.sleep(self.latency)
        visit.end = time.monotonic()
        return web.Response(text=ROBOTS)

    async def handle(self, request: web.Request) -> web.Response:
        visit = Visit(request.path, time.monotonic())
        self.visits.append(visit)
        self.visited()
        await asyncio.sleep(self.latency)
        wait = self.throttle.pop(request.path, None)
        if wait is not None:
            visit.status, visit.end = 429, time.monotonic()
            return web.Response(status=429, headers={"Retry-After": str(wait)})
        if request.path in self.redirects:
            visit.status, visit.end = 302, time.monotonic()
            return web.Response(status=302, headers={"Location": self.redirects[request.path]})
        number = int(request.path[2:-5])  # /p<n>.html
        links = "".join(
            f'<a href="/p{n}.html">{n}</a>'
            for n in (2 * number + 1, 2 * number + 2)
            if n < self.pages
        )
        visit.end = time.monotonic()
        return web.Response(text=f"<html><body>{links}</body></html>", content_type="text/html")

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/{page:p[0-9]+\\.html}", self.handle)
        app.router.add_get("/robots.txt", self.robots)
        return app


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
            await stack.enter_async_context(serve(s.app(), a))
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
