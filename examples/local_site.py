"""A spider crawling a local catalogue site, and the site itself.

Serve the site, then crawl it (items are dataclasses, written as JSON lines)::

    python examples/local_site.py --port 8000
    netdisco crawl examples/local_site.py:Catalogue -o items.jsonl -s concurrency=8

``LOCAL_SITE_URL`` points the spider at another copy of the site (the tests
mount it under a path of their own server). Links on the site are relative, so
it works under any path.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from netdisco import Response, Spider

#: how many product pages the site has
PAGES = 30


@dataclass(frozen=True)
class Product:
    """One item block of the catalogue."""

    title: str
    price: float
    sku: str
    url: str


def product(number: int) -> tuple[str, float, str]:
    """The (title, price, sku) of page ``number``: deterministic, so results can be checked."""
    return f"Product {number}", (number * 37) % 100 + 0.99, f"SKU-{number:05d}"


def page_html(number: int) -> str:
    """Product page ``number``: its item block and links to two other pages."""
    title, price, sku = product(number)
    links = "".join(
        f'<a class="page" href="{n}">page {n}</a>'
        for n in ((number + 1) % PAGES, (2 * number + 1) % PAGES)
    )
    return (
        f"<html><head><title>{title}</title></head><body>"
        f'<div class="product"><h1 class="title">{title}</h1>'
        f'<span class="price">{price:.2f}</span><span class="sku">{sku}</span></div>'
        f"<nav>{links}</nav></body></html>"
    )


async def _index(request: web.Request) -> web.Response:
    return web.Response(
        text='<html><body><a class="page" href="p/0">start</a></body></html>',
        content_type="text/html",
    )


async def _page(request: web.Request) -> web.Response:
    number = int(request.match_info["number"])
    if number >= PAGES:
        raise web.HTTPNotFound()
    return web.Response(text=page_html(number), content_type="text/html")


async def _sitemap(request: web.Request) -> web.Response:
    """Every product page, for ``SitemapSpider``s (URLs relative to the sitemap's own,
    so that it works under any path too)."""
    here = str(request.url).rsplit("/", 1)[0]
    urls = "".join(f"<url><loc>{here}/p/{n}</loc></url>" for n in range(PAGES))
    xmlns = 'xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"'
    body = f'<?xml version="1.0" encoding="UTF-8"?><urlset {xmlns}>{urls}</urlset>'
    return web.Response(text=body, content_type="application/xml")


def make_app() -> web.Application:
    """The catalogue as an aiohttp application (mountable as a sub-application)."""
    app = web.Application()
    app.router.add_get("/", _index)
    app.router.add_get("/p/{number:\\d+}", _page)
    app.router.add_get("/sitemap.xml", _sitemap)
    return app


class Catalogue(Spider):
    """Takes every product block and follows the page links."""

    name = "catalogue"
    start_urls = (os.environ.get("LOCAL_SITE_URL", "http://127.0.0.1:8000/"),)
    allowed_domains = ("127.0.0.1",)

    async def parse(self, response: Response) -> AsyncIterator[Any]:
        for block in response.css("div.product"):
            yield Product(
                title=block.css("h1.title::text").get(""),
                price=float(block.css("span.price::text").get("0")),
                sku=block.css("span.sku::text").get(""),
                url=response.url,
            )
        for link in response.css("a.page"):
            yield response.follow(link, callback=self.parse)


def main() -> None:
    parser = argparse.ArgumentParser(description="serve the catalogue site on loopback")
    parser.add_argument("--port", type=int, default=8000)
    port = parser.parse_args().port
    web.run_app(make_app(), host="127.0.0.1", port=port)


if __name__ == "__main__":
    main()
