"""A SpiderEngine inside an aiohttp application you already have.

The engine keeps no global state and lives in the running loop, so the
application starts and stops it with its own ``cleanup_ctx`` and mounts the
engine's HTTP routes under a prefix of its own site instead of opening a second
port (``EngineSettings(http=False)``, with ``advertise_url`` saying where the routes
are, for a ZooKeeper node and the monitor). The application's own handlers read what
the spider found through a plain pipeline and push more URLs to it: the spider is
kept alive (``keep_alive=True``), so it takes pushes for as long as the application
runs, not only until it has crawled its start URL (docs/embedding.md).

    python examples/embed_aiohttp.py http://127.0.0.1:8000/ --port 8080
    curl http://127.0.0.1:8080/titles
    curl http://127.0.0.1:8080/crawler/netdiscovery/spiders

Mounted routes are the engine's own, so its control routes check the bearer token
from ``$NETDISCO_TOKEN`` when one is set. Without one they accept anybody, and the
engine cannot know where the application listens: ``main`` refuses a host other
than loopback without a token.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any
from urllib.parse import urlsplit

from aiohttp import web

from netdisco import (
    CallablePipeline,
    EngineSettings,
    Request,
    Response,
    Spider,
    SpiderEngine,
    create_app,
)
from netdisco.values import is_loopback

ENGINE = web.AppKey("engine", SpiderEngine)
TITLES = web.AppKey("titles", dict[str, str])


class TitlesSpider(Spider):
    """The title of every page of one host."""

    name = "titles"

    def parse(self, response: Response) -> Iterator[dict[str, Any] | Request]:
        yield {"url": response.url, "title": response.css("title::text").get(default="")}
        for href in response.css("a::attr(href)").getall():
            yield response.follow(href, callback=self.parse)


async def titles(request: web.Request) -> web.Response:
    """The application's own route, fed by the spider."""
    return web.json_response(request.app[TITLES])


async def crawl_more(request: web.Request) -> web.Response:
    """``POST /crawl {"url": ...}``: hand one more URL to the running spider."""
    body = await request.json()
    result = await request.app[ENGINE].push("titles", [str(body.get("url", ""))])
    return web.json_response({"accepted": len(result.accepted)}, status=202)


def make_app(
    start_url: str, token: str | None = None, advertise: str | None = None
) -> web.Application:
    """The application, with an engine that crawls ``start_url``'s host; ``advertise``
    is where the engine's routes are reached (``http://HOST:PORT/crawler``)."""
    app = web.Application()
    found: dict[str, str] = {}
    settings = EngineSettings(id="embedded", http=False, token=token, advertise_url=advertise)
    engine = SpiderEngine(settings)
    spider = TitlesSpider(start_urls=[start_url], allowed_domains=[urlsplit(start_url).hostname])
    engine.add_spider(
        spider,
        pipelines=[CallablePipeline(lambda i: found.update({i["url"]: i["title"]}))],
        keep_alive=True,  # waits for pushes when it has crawled everything
    )
    app[ENGINE] = engine
    app[TITLES] = found

    async def run_engine(app: web.Application) -> AsyncIterator[None]:
        await engine.start()
        yield
        await engine.stop()

    app.cleanup_ctx.append(run_engine)
    app.router.add_get("/titles", titles)
    app.router.add_post("/crawl", crawl_more)
    app.add_subapp("/crawler", create_app(engine))
    return app


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url", help="where the spider starts, e.g. http://127.0.0.1:8000/")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8080)
    args = parser.parse_args(argv)
    token = os.environ.get("NETDISCO_TOKEN")
    if token is None and not is_loopback(args.host):
        # the mounted routes cannot see where the application listens: refuse here
        parser.error(f"--host {args.host} is reachable from other machines: set NETDISCO_TOKEN")
    advertise = f"http://{args.host}:{args.port}/crawler"
    web.run_app(make_app(args.url, token, advertise), host=args.host, port=args.port)


if __name__ == "__main__":
    main()
