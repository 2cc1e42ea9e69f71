"""``CrawlSpider`` rules and ``LinkExtractor``, against a loopback site and by hand."""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator, Iterable, Iterator
from typing import Any

import pytest
from aiohttp import web
from multidict import CIMultiDict

from netdisco import (
    CallablePipeline,
    Crawler,
    CrawlSpider,
    Link,
    LinkExtractor,
    Request,
    Response,
    Rule,
    Settings,
)
from netdisco.testing import serve

PAGES = {
    "/": """<html><body>
        <div id="nav"><a href="/cat/a">A</a> <a href="/cat/b">B</a></div>
        <div id="content">
          <a href="/items/1">one</a> <a href="/items/2">two</a>
          <a href="/items/2#again">two again</a>
          <a href="/files/report.pdf">pdf</a> <a href="/img/logo.PNG">png</a>
          <a href="/files/data.tar.gz">tarball</a>
          <a href="mailto:someone@example.com">mail</a>
          <a href="/private/x">private</a>
        </div></body></html>""",
    "/cat/a": """<html><body><a href="/items/3">three</a> <a href="/cat/a?page=2">next</a>
        <a href="/items/1">one</a></body></html>""",
    "/cat/a?page=2": "<html><body><a href='/items/9'>nine</a></body></html>",
    "/cat/b": "<html><body><a href='/items/4'>four</a> <a href='/cat/a'>A</a></body></html>",
}


class Site:
    """Serves ``PAGES`` and ``/items/N`` pages; counts each path (with query) asked."""

    def __init__(self) -> None:
        self.hits: Counter[str] = Counter()
        self.base = ""

    async def handle(self, request: web.Request) -> web.Response:
        self.hits[request.path_qs] += 1
        if request.path.startswith("/items/"):
            body = f"<html><body><h1>item {request.path.rsplit('/', 1)[1]}</h1></body></html>"
        elif request.path_qs in PAGES:
            body = PAGES[request.path_qs]
        else:
            return web.Response(status=404)
        return web.Response(text=body, content_type="text/html")


@pytest.fixture
async def site() -> AsyncIterator[Site]:
    site = Site()
    app = web.Application()
    app.router.add_get("/{path:.*}", site.handle)
    async with serve(app) as site.base:
        yield site


class Shop(CrawlSpider):
    name = "shop"
    rules = (
        Rule(LinkExtractor(allow=r"/cat/", deny=r"page=\d"), follow=True),
        Rule(
            LinkExtractor(allow=r"/items/\d+", deny_domains="other.test"),
            callback="parse_item",
            cb_kwargs={"shop": "loopback"},
            process_links="no_four",
        ),
    )

    def parse_start_url(self, response: Response) -> Iterator[Any]:
        yield {"start": response.url}

    def parse_item(self, response: Response, shop: str) -> Iterator[Any]:
        yield {"item": response.css("h1::text").get(), "shop": shop}

    def no_four(self, links: list[Link]) -> Iterable[Link]:
        return [link for link in links if not link.url.endswith("/4")]


async def crawl(spider: CrawlSpider) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    settings = Settings(obey_robots=False, concurrency=4)
    await Crawler(spider, settings, pipelines=[CallablePipeline(items.append)]).run()
    return items


async def test_rules_follow_categories_and_call_back_items(site: Site) -> None:
    spider = Shop(start_urls=[site.base + "/"])
    items = await crawl(spider)
    found = sorted(i["item"] for i in items if "item" in i)
    assert found == ["item 1", "item 2", "item 3"]  # 4 cut by process_links, 9 by deny
    assert {i["shop"] for i in items if "item" in i} == {"loopback"}
    assert [i for i in items if "start" in i] == [{"start": site.base + "/"}]
    assert site.hits["/cat/a"] == site.hits["/cat/b"] == site.hits["/items/1"] == 1
    assert site.hits["/cat/a?page=2"] == 0
    # binary files are skipped by default, and /private/x matches no rule
    assert not [p for p in site.hits if p.startswith(("/files", "/img", "/private"))]


async def test_an_item_rule_does_not_follow_by_default_and_process_request_drops(
    site: Site,
) -> None:
    class Items(CrawlSpider):
        name = "items"
        rules = (
            Rule(LinkExtractor(restrict_css="#nav"), process_request="only_b"),
            Rule(LinkExtractor(allow=r"/items/"), callback="parse_item"),
        )

        def only_b(self, request: Request, response: Response) -> Request | None:
            request.headers["X-Rule"] = "nav"
            return request if request.url.endswith("/cat/b") else None

        def parse_item(self, response: Response) -> Iterator[Any]:
            yield {"item": response.url.rsplit("/", 1)[1]}

    items = await crawl(Items(start_urls=[site.base + "/"]))
    assert sorted(i["item"] for i in items) == ["1", "2", "4"]
    assert site.hits["/cat/a"] == 0  # dropped by process_request, so never asked for
    assert site.hits["/cat/b"] == 1


def page(
    body: str, url: str = "http://127.0.0.1:8000/dir/page.html", kind: str = "text/html"
) -> Response:
    headers = CIMultiDict({"Content-Type": kind})
    return Response(url, 200, headers, body.encode(), Request(url))


def test_extract_links_alone_filters_and_resolves() -> None:
    response = page(
        """<html><head><base href="http://127.0.0.1:8000/base/"></head><body>
        <a href=" rel.html ">Relative <b>text</b></a>
        <a href="/abs.html" rel="nofollow">abs</a>
        <a href="/abs.html">again</a>
        <a href="http://sub.example.test/x">sub</a> <a href="http://example.test/y">root</a>
        <a href="http://elsewhere.test/z">elsewhere</a>
        <a href="/movie.MP4">movie</a> <a href="/doc.pdf?download=1">doc</a>
        <a href="javascript:void(0)">js</a> <a name="anchor">no href</a>
        <img src="/picture.html"></body></html>"""
    )
    links = LinkExtractor().extract_links(response)
    assert [link.url for link in links] == [
        "http://127.0.0.1:8000/base/rel.html",
        "http://127.0.0.1:8000/abs.html",
        "http://sub.example.test/x",
        "http://example.test/y",
        "http://elsewhere.test/z",
    ]  # the movie and the PDF skipped (the path's extension, whatever the query or case)
    assert links[0].text == "Relative text"
    assert links[1].nofollow
    scoped = LinkExtractor(allow_domains="example.test", deny_domains="sub.example.test")
    assert [link.url for link in scoped.extract_links(response)] == ["http://example.test/y"]
    images = LinkExtractor(tags="img", attrs="src", deny_extensions=())
    assert [link.url for link in images.extract_links(response)] == [
        "http://127.0.0.1:8000/picture.html"
    ]
    everything = LinkExtractor(deny_extensions=[])
    assert "http://127.0.0.1:8000/movie.MP4" in [
        link.url for link in everything.extract_links(response)
    ]


def test_restrict_xpaths_and_process_value() -> None:
    response = page(
        """<html><body><ul class="menu"><li><a href="a.html">a</a></li></ul>
        <p><a href="b.html">b</a> <a href="javascript:go('c.html')">c</a></p></body></html>"""
    )
    menu = LinkExtractor(restrict_xpaths="//ul[@class='menu']")
    assert [link.url for link in menu.extract_links(response)] == [
        "http://127.0.0.1:8000/dir/a.html"
    ]

    def unwrap(value: str) -> str | None:
        return value.split("'")[1] if value.startswith("javascript:") else value

    para = LinkExtractor(restrict_css="p", process_value=unwrap)
    assert [link.url for link in para.extract_links(response)] == [
        "http://127.0.0.1:8000/dir/b.html",
        "http://127.0.0.1:8000/dir/c.html",
    ]


def test_a_binary_response_has_no_links() -> None:
    response = page("<a href='/x'>x</a>", kind="image/png")
    assert LinkExtractor().extract_links(response) == []


def test_a_rule_naming_a_missing_method_fails_at_start() -> None:
    class Broken(CrawlSpider):
        rules = (Rule(LinkExtractor(), callback="nowhere"),)

    with pytest.raises(AttributeError, match="nowhere"):
        Broken()
