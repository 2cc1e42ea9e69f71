"""Fuzzing the response decoder and link extraction: random bytes with random declared
charsets, served by a real server on loopback and crawled by a spider that decodes the
page and follows its links. Whatever the page, no exception escapes the spider.

The links are rewritten to stay on this server (every other host is out of scope).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from aiohttp import web
from hypothesis import example, given
from hypothesis import strategies as st

from netdisco import CallablePipeline, Crawler, Request, Response, Settings, Spider
from netdisco.testing import serve
from tests.fuzzing import examples

pytestmark = pytest.mark.fuzz

#: real charsets, and "undefined": a codec Python knows that refuses to decode anything
CHARSETS = ["utf-8", "latin-1", "gbk", "shift_jis", "utf-16", "cp1252", "big5", "undefined"]
_charset = st.one_of(
    st.sampled_from(CHARSETS),
    st.text(alphabet=st.characters(min_codepoint=33, max_codepoint=126), max_size=20),
)
_markup = st.lists(
    st.sampled_from(
        [
            b"<a href='",
            b"'>",
            b"</a>",
            b"<meta charset=",
            b"<html>",
            b"<a>",
            b"\x00",
            b"&#",
            b"<!--",
        ]
    )
    | st.binary(max_size=40),
    max_size=30,
).map(b"".join)


class Decoding(Spider):
    """Decodes each page, reads it with CSS and XPath, follows every link once."""

    name = "decoding"
    allowed_domains = ("127.0.0.1",)

    def parse(self, response: Response) -> Iterator[Any]:
        yield {"text": len(response.text), "encoding": response.encoding}
        yield {"titles": response.xpath("//title/text()").getall()}
        if response.request.depth == 0:
            yield from response.follow_all(css="a", callback=self.parse)
            for href in response.css("a::attr(href), link::attr(href)").getall():
                yield response.follow(href, callback=self.parse)


class Page:
    """The one page the server answers with, whatever the path."""

    body = b""
    content_type = "text/html"

    async def handle(self, request: web.Request) -> web.Response:
        return web.Response(body=self.body, headers={"Content-Type": self.content_type})


async def crawl_page(base: str) -> Crawler:
    items: list[Any] = []
    settings = Settings(obey_robots=False, progress_interval=0, retries=0, concurrency=4)
    spider = Decoding(start_urls=[f"{base}/"])
    crawler = Crawler(spider, settings, pipelines=[CallablePipeline(items.append)])
    await asyncio.wait_for(crawler.run(), 30)
    return crawler


@examples(30)
@given(
    body=st.one_of(st.binary(max_size=2000), _markup),
    charset=st.one_of(st.none(), _charset),
    where=st.sampled_from(["header", "meta", "both"]),
)
@example(body=b"<a href='/x'>x</a>", charset="undefined", where="header")  # found by fuzzing
@example(body=b"<a \x01>", charset=None, where="header")  # found by fuzzing
async def test_no_page_makes_the_spider_raise(body: bytes, charset: str | None, where: str) -> None:
    page = Page()
    page.body = body
    if charset is not None and where in ("meta", "both"):
        page.body = f'<meta charset="{charset}">'.encode("ascii", "replace") + body
    if charset is not None and where in ("header", "both"):
        page.content_type = f"text/html; charset={charset}"
    app = web.Application()
    app.router.add_get("/{tail:.*}", page.handle)
    async with serve(app) as base:
        crawler = await crawl_page(base)
    stats = crawler.stats
    assert crawler.state.value == "finished", stats.last_error
    assert (stats.callback_errors, stats.pipeline_errors) == (0, 0), stats.last_error
    assert stats.succeeded >= 1


@examples(200)
@given(body=st.one_of(st.binary(max_size=3000), _markup), content_type=_charset)
def test_the_decoder_and_link_extraction_never_raise(body: bytes, content_type: str) -> None:
    response = Response(
        "http://127.0.0.1/p", 200, {"Content-Type": f"text/html; charset={content_type}"}, body,
        Request("http://127.0.0.1/p"),
    )  # fmt: skip
    assert isinstance(response.text, str)
    response.follow_all(css="a")
    for href in response.css("a::attr(href)").getall() + response.xpath("//@src").getall():
        response.follow(href)
