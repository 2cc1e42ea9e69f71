"""A generated 200-page site on loopback, and a spider that crawls it (engine/API tests).

``/fast/p/N`` answers at once; ``/slow/p/N`` waits ``SLOW`` seconds first, so a
spider on it stays running long enough to be paused, resumed and stopped.
Page N links to pages 2N+1 and 2N+2 (a binary tree: all N pages reachable) and
back to page 0.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

from aiohttp import web

from netdisco import Request, Response, Spider
from netdisco.engine import SpiderEngine

PAGES = 200
SLOW = 0.05


async def page(request: web.Request) -> web.Response:
    speed = request.match_info["speed"]
    number = int(request.match_info["number"])
    if number >= PAGES:
        raise web.HTTPNotFound()
    if speed == "slow":
        await asyncio.sleep(SLOW)
    links = "".join(
        f'<a href="/{speed}/p/{child}">page {child}</a>'
        for child in (2 * number + 1, 2 * number + 2, 0)
        if child < PAGES
    )
    html = f"<html><body><h1>Page {number}</h1>{links}<a href='http://127.0.0.254:9/'>off</a></body></html>"
    return web.Response(text=html, content_type="text/html")


async def hang(request: web.Request) -> web.Response:
    """Never answers in time: the request stays in flight until it is cancelled."""
    await asyncio.sleep(3600)
    return web.Response(text="late")


async def robots(request: web.Request) -> web.Response:
    return web.Response(text="User-agent: *\nAllow: /\n")


async def start_site() -> tuple[web.AppRunner, str]:
    """Serve the site on a free loopback port; the runner (to clean up) and the base URL."""
    app = web.Application()
    app.router.add_get("/{speed:fast|slow}/p/{number:\\d+}", page)
    app.router.add_get("/robots.txt", robots)
    app.router.add_get("/hang", hang)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, f"http://127.0.0.1:{runner.addresses[0][1]}"


class SiteSpider(Spider):
    """Takes each page's title and follows every link (off-site ones are dropped by scope)."""

    name = "site"
    allowed_domains = ("127.0.0.1",)

    def parse(self, response: Response) -> Iterator[dict[str, Any] | Request]:
        yield {"url": response.url, "title": response.css("h1::text").get()}
        for href in response.css("a::attr(href)").getall():
            yield response.follow(href, callback=self.parse)


def site_spider(name: str, base: str, speed: str = "fast") -> SiteSpider:
    return SiteSpider(name=name, start_urls=[f"{base}/{speed}/p/0"])


class FakeRegistry:
    """Records what the engine asks of its registry (pure logic, no ZooKeeper)."""

    def __init__(self, engine_id: str, describe: Any, log: list[str]) -> None:
        self.engine_id = engine_id
        self.describe = describe
        self.log = log
        self.healthy = True
        self.changes = 0

    async def start(self) -> None:
        self.log.append("registry.start")

    def data_changed(self) -> None:
        self.changes += 1

    async def stop(self) -> None:
        self.log.append("registry.stop")

    def status(self) -> dict[str, Any]:
        return {"state": "registered" if self.healthy else "expired"}


__all__ = ["FakeRegistry", "SiteSpider", "SpiderEngine", "site_spider", "start_site"]
