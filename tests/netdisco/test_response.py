"""Response decoding (served for real on loopback) and link following."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from parsel import Selector

from netdisco import Request, Response, Spider
from tests.netdisco.sites import TEXTS, Site, crawl, running_site


@pytest.fixture
async def site() -> AsyncIterator[Site]:
    async with running_site() as served:
        yield served


class TextSpider(Spider):
    """Yields each page's paragraph text and the encoding it was decoded with."""

    name = "text"

    def parse(self, response: Response) -> Iterator[dict[str, Any]]:
        yield {"text": response.css("p::text").get(), "encoding": response.encoding}


@pytest.mark.parametrize("mode", ["header", "meta", "none"])
@pytest.mark.parametrize("codec", ["gbk", "shift_jis", "latin-1"])
async def test_pages_are_decoded_with_the_right_charset(site: Site, codec: str, mode: str) -> None:
    spider = TextSpider(start_urls=[site.url(f"/enc/{codec}/{mode}")])
    crawler, items = await crawl(spider)
    assert crawler.stats.succeeded == 1
    assert [item["text"] for item in items] == [TEXTS[codec]]


def _response(
    body: bytes, content_type: str = "text/html", url: str = "http://a.test/x/y"
) -> Response:
    return Response(url, 200, {"Content-Type": content_type}, body, Request(url, depth=2))


def test_header_charset_wins_over_meta() -> None:
    body = '<html><head><meta charset="utf-8"></head><p>café</p></html>'.encode("latin-1")
    response = _response(body, "text/html; charset=iso-8859-1")
    assert response.css("p::text").get() == "café"


def test_undeclared_utf8_and_unknown_charset() -> None:
    assert _response("<p>naïve — ok</p>".encode()).css("p::text").get() == "naïve — ok"
    page = _response("<p>déjà vu</p>".encode(), "text/html; charset=no-such-codec")
    assert page.css("p::text").get() == "déjà vu"


def test_text_and_selector_are_built_once() -> None:
    response = _response(b"<p>x</p>")
    assert response.text is response.text
    assert response.selector is response.selector


LINKS = b"""<html><body>
<a class="next" href="/next?page=2">next</a>
<a class="item" href="item/1"> item 1 </a><a class="item" name="anchor">no link</a>
<a class="item" href="item/2">item 2</a>
<link rel="alternate" href="http://b.test/feed">
<img src="/img.png"><span class="nolink">x</span>
</body></html>"""


def test_follow_strings_and_selectors() -> None:
    response = _response(LINKS)
    request = response.follow(" ../z ", priority=3, meta={"k": 1})
    assert (request.url, request.depth, request.priority, request.meta) == (
        "http://a.test/z",
        3,
        3,
        {"k": 1},
    )
    assert response.follow(response.css("a.next")[0]).url == "http://a.test/next?page=2"
    assert response.follow(response.css("link")[0]).url == "http://b.test/feed"
    assert response.follow(response.css("img")[0]).url == "http://a.test/img.png"
    with pytest.raises(ValueError, match="no href or src"):
        response.follow(response.css("span.nolink")[0])


def test_follow_all_by_css_xpath_and_urls() -> None:
    response = _response(LINKS)
    expected = ["http://a.test/x/item/1", "http://a.test/x/item/2"]
    assert [r.url for r in response.follow_all(css="a.item")] == expected
    assert [r.url for r in response.follow_all(css="a.item::attr(href)")] == expected
    assert [r.url for r in response.follow_all(xpath="//a[@class='item']")] == expected
    mixed: list[str | Selector] = ["/a", Selector(text="<a href='/b'>b</a>").css("a")[0]]
    assert [r.url for r in response.follow_all(mixed)] == ["http://a.test/a", "http://a.test/b"]
    with pytest.raises(ValueError, match="needs urls, css or xpath"):
        response.follow_all()


class FollowSpider(Spider):
    """Follows ``a.next`` by selector and items by ``follow_all(css=...)``, one callback each."""

    name = "follow"

    def parse(self, response: Response) -> Iterator[Any]:
        yield from response.follow_all(css="a.item", callback=self.parse_item)
        for link in response.css("a.next"):
            yield response.follow(link, callback=self.parse)

    async def parse_item(self, response: Response) -> AsyncIterator[dict[str, Any]]:
        yield {"url": response.url, "depth": response.request.depth}


async def test_follow_callbacks_on_a_real_site(site: Site) -> None:
    crawler, items = await crawl(FollowSpider(start_urls=[site.url("/list/0")]))
    found = sorted((item["url"], item["depth"]) for item in items)
    expected = [(site.url(f"/tree/{10 + 2 * n + k}"), n + 1) for n in range(3) for k in range(2)]
    assert found == sorted(expected)
    assert site.paths("/list/") == ["/list/0", "/list/1", "/list/2"]
    assert crawler.stats.succeeded == 9
