"""The site the namespaced cluster crawls, counting every fetch at the server, and its spider.

``/p/N`` links to ``/p/2N+1`` and ``/p/2N+2`` (a binary tree of ``PAGES`` pages, every
page reachable from ``/p/0``) and answers after ``DELAY`` seconds, so a crawl of three
engines lasts long enough to cut links under it.

The site is ``HOSTS`` hosts (``NDC_SITE_HOSTS``, 8 by default): one server on ports
``port`` to ``port + HOSTS - 1`` of its address, each port a host of its own to the
crawl (``host_key`` is ``host:port``), each serving the same tree. Page ``N`` lives on
the host ``N % HOSTS`` (``page_url``) and its links point there, so the tree spreads
over every host and, with owned hosts, over every engine. Pages are counted by path,
whatever port fetched them.

Every port answers for the whole site: ``/counts`` says how many times each page was
fetched, ``/fetches`` when, by which address and on which port: a page fetched twice is
counted where it happened. ``POST /delay/S`` changes the delay, ``/counts/reset``
forgets.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import time
from collections.abc import Iterator
from typing import Any, ClassVar
from urllib.parse import urlsplit

from aiohttp import web

from netdisco import Response, Spider

PAGES = int(os.environ.get("NDC_PAGES", "600"))
DELAY = float(os.environ.get("NDC_DELAY", "0.05"))
HOSTS = int(os.environ.get("NDC_SITE_HOSTS", "8"))
SITE_ENV = "NDC_SITE"  # the site's base URL (its first port), in the engines' environment
_BASE = os.environ.get(SITE_ENV, "http://127.0.0.1:8000").rstrip("/")

#: what ``/fetches`` lists: (time, client address, path, the port that served it)
Fetch = tuple[float, str, str, int]


def page_paths(pages: int = PAGES) -> set[str]:
    return {f"/p/{n}" for n in range(pages)}


def page_url(base: str, number: int, hosts: int = HOSTS) -> str:
    """Page ``number``'s URL on its own host: ``base``'s address, port ``base``'s port
    plus ``number % hosts``."""
    split = urlsplit(base)
    port = (split.port or 80) + number % hosts
    return f"{split.scheme}://{split.hostname}:{port}/p/{number}"


def site_ports(port: int, hosts: int = HOSTS) -> list[int]:
    """The ports of the site's hosts, the first ``port``."""
    return [port + n for n in range(hosts)]


def make_app(
    base: str = _BASE, pages: int = PAGES, delay: float = DELAY, hosts: int = HOSTS
) -> web.Application:
    """The site: one app, served on every port of the site (one count for all)."""
    counts: collections.Counter[str] = collections.Counter()
    fetches: list[Fetch] = []
    pace = {"delay": delay}

    async def page(request: web.Request) -> web.Response:
        number = int(request.match_info["n"])
        if number >= pages:
            raise web.HTTPNotFound()
        counts[request.path] += 1
        sockname = request.transport.get_extra_info("sockname") if request.transport else None
        port = int(sockname[1]) if sockname else 0
        fetches.append((time.time(), request.remote or "", request.path, port))
        await asyncio.sleep(pace["delay"])
        links = "".join(
            f'<a href="{page_url(base, c, hosts)}">{c}</a> '
            for c in (2 * number + 1, 2 * number + 2)
            if c < pages
        )
        return web.Response(text=f"<h1>page {number}</h1>{links}", content_type="text/html")

    async def robots(_: web.Request) -> web.Response:
        return web.Response(text="User-agent: *\nAllow: /\n")

    async def counted(_: web.Request) -> web.Response:
        return web.json_response(dict(counts))

    async def fetched(_: web.Request) -> web.Response:
        return web.json_response(fetches)

    async def reset(_: web.Request) -> web.Response:
        counts.clear()
        fetches.clear()
        return web.json_response({})

    async def set_delay(request: web.Request) -> web.Response:
        pace["delay"] = float(request.match_info["seconds"])
        return web.json_response(pace)

    app = web.Application()
    app.router.add_get(r"/p/{n:\d+}", page)
    app.router.add_get("/robots.txt", robots)
    app.router.add_get("/counts", counted)
    app.router.add_get("/fetches", fetched)
    app.router.add_post("/counts/reset", reset)
    app.router.add_post(r"/delay/{seconds:[0-9.]+}", set_delay)
    return app


class Tree(Spider):
    """Every page of the tree once, one item each; the site's address is allowed by name
    (every port of it: each a host of the crawl)."""

    name = "tree"
    # read when the engine imports this module, in its own environment
    start_urls: ClassVar[list[str]] = [page_url(_BASE, 0)]
    allowed_domains = (urlsplit(_BASE).hostname or "",)
    custom_settings: ClassVar[dict[str, Any]] = {"concurrency": 8, "per_host_concurrency": 8}

    def parse(self, response: Response) -> Iterator[dict[str, Any] | Any]:
        yield {"url": response.url}
        yield from response.follow_all(response.css("a::attr(href)").getall(), self.parse)


async def serve(host: str, port: int, hosts: int = HOSTS) -> None:
    """The site on ``hosts`` ports from ``port`` up, until cancelled."""
    app = make_app(f"http://{host}:{port}", hosts=hosts)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    try:
        for each in site_ports(port, hosts):
            await web.TCPSite(runner, host, each).start()
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--host", required=True)
    parser.add_argument("--port", type=int, required=True, help="the first host's port")
    parser.add_argument("--hosts", type=int, default=HOSTS, help="how many ports (hosts)")
    args = parser.parse_args()
    asyncio.run(serve(args.host, args.port, args.hosts))


if __name__ == "__main__":
    main()
