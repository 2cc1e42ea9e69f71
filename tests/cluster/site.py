"""The site the namespaced cluster crawls, counting every fetch at the server, and its spider.

``/p/N`` links to ``/p/2N+1`` and ``/p/2N+2`` (a binary tree of ``PAGES`` pages, every
page reachable from ``/p/0``) and answers after ``DELAY`` seconds, so a crawl of three
engines lasts long enough to cut links under it. ``/counts`` answers how many times
each page was fetched, ``/fetches`` when and by which address: a page fetched twice is
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
SITE_ENV = "NDC_SITE"  # the site's base URL, in the engines' environment
_BASE = os.environ.get(SITE_ENV, "http://127.0.0.1:8000").rstrip("/")


def page_paths(pages: int = PAGES) -> set[str]:
    return {f"/p/{n}" for n in range(pages)}


def make_app(pages: int = PAGES, delay: float = DELAY) -> web.Application:
    counts: collections.Counter[str] = collections.Counter()
    fetches: list[tuple[float, str, str]] = []  # (time, client address, path)
    pace = {"delay": delay}

    async def page(request: web.Request) -> web.Response:
        number = int(request.match_info["n"])
        if number >= pages:
            raise web.HTTPNotFound()
        counts[request.path] += 1
        fetches.append((time.time(), request.remote or "", request.path))
        await asyncio.sleep(pace["delay"])
        links = "".join(
            f'<a href="/p/{c}">{c}</a> ' for c in (2 * number + 1, 2 * number + 2) if c < pages
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
    """Every page of the tree once, one item each; the site's host is allowed by name."""

    name = "tree"
    # read when the engine imports this module, in its own environment
    start_urls: ClassVar[list[str]] = [f"{_BASE}/p/0"]
    allowed_domains = (urlsplit(_BASE).hostname or "",)
    custom_settings: ClassVar[dict[str, Any]] = {"concurrency": 8, "per_host_concurrency": 8}

    def parse(self, response: Response) -> Iterator[dict[str, Any] | Any]:
        yield {"url": response.url}
        yield from response.follow_all(response.css("a::attr(href)").getall(), self.parse)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--host", required=True)
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    web.run_app(make_app(), host=args.host, port=args.port, access_log=None, print=None)


if __name__ == "__main__":
    main()
