"""gzip, deflate and brotli bodies are decoded; the request says it accepts all three."""

from __future__ import annotations

import gzip
import zlib
from collections.abc import AsyncIterator, Iterator
from typing import Any

import brotli
import pytest
from aiohttp import web

from netdisco import Crawler, Request, Response, Settings, Spider
from netdisco.testing import serve

PAGE = "<html><body><h1>Grüße, 世界</h1></body></html>".encode()
ENCODERS = {"gzip": gzip.compress, "deflate": zlib.compress, "br": brotli.compress}


@pytest.fixture
async def site() -> AsyncIterator[tuple[str, list[str]]]:
    accepted: list[str] = []

    async def page(request: web.Request) -> web.Response:
        accepted.append(request.headers.get("Accept-Encoding", ""))
        encoding = request.match_info["encoding"]
        headers = {"Content-Encoding": encoding, "Content-Type": "text/html; charset=utf-8"}
        return web.Response(body=ENCODERS[encoding](PAGE), headers=headers)

    app = web.Application()
    app.router.add_get("/{encoding}", page)
    async with serve(app) as base:
        yield base, accepted


class Titles(Spider):
    name = "titles"

    def __init__(self, base: str) -> None:
        super().__init__()
        self.base = base

    async def start(self) -> AsyncIterator[Request]:
        for encoding in ENCODERS:
            yield Request(f"{self.base}/{encoding}", callback=self.parse)

    def parse(self, response: Response) -> Iterator[Any]:
        yield {"url": response.url, "title": response.css("h1::text").get()}


async def test_every_encoding_is_decoded(site: tuple[str, list[str]]) -> None:
    base, accepted = site
    items: list[dict[str, Any]] = []
    crawler = Crawler(Titles(base), Settings(obey_robots=False))
    crawler.items.subscribe(items.append)
    await crawler.run()
    assert sorted(i["url"].rsplit("/", 1)[1] for i in items) == ["br", "deflate", "gzip"]
    assert {i["title"] for i in items} == {"Grüße, 世界"}
    assert all({"gzip", "deflate", "br"} <= set(a.replace(" ", "").split(",")) for a in accepted)
