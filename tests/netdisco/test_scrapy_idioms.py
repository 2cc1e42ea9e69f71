"""Scrapy's idioms, one at a time: each of these failed, or did something else in silence,
before netdisco understood it (issue: Scrapy spiders move over)."""

from __future__ import annotations

import dataclasses
import json
import logging
import weakref
from collections import UserDict
from collections.abc import Iterator
from types import MappingProxyType
from typing import Any
from urllib.parse import parse_qsl

import attrs
import itemloaders
import pytest
from itemloaders.processors import TakeFirst
from multidict import CIMultiDict

import netdisco as scrapy
from netdisco import Crawler, Field, FormRequest, Item, ItemLoader, MockHandler, Request, Response
from netdisco.crawl.codec import decode, encode, pack
from netdisco.crawl.pipelines import json_line
from netdisco.crawl.settings import from_mapping
from netdisco.crawl.summary import exit_code, render, summary
from netdisco.exceptions import ConfigError

FORMS = b"""<html><body>
<form name="search" action="/search"><input name="q" value="x"></form>
<form id="login" name="login" action="/login?next=%2F" method="POST" class="auth">
  <input type="hidden" name="csrf" value="T1">
  <input name="user"><input type="checkbox" name="remember" value="1">
  <input type="checkbox" name="terms" value="yes" checked>
  <select name="lang"><option value="en">English</option><option value="fr">French</option></select>
  <textarea name="note">hi</textarea>
  <input type="submit" name="go" value="Log in"><button name="go" value="Register">R</button>
</form></body></html>"""


def page(
    body: bytes, url: str = "http://site.test/login", content_type: str = "text/html"
) -> Response:
    return Response(url, 200, CIMultiDict({"Content-Type": content_type}), body, Request(url))


def fields(request: Request) -> list[tuple[str, str]]:
    return parse_qsl((request.body or b"").decode(), keep_blank_values=True)


class Catalogue(scrapy.Spider):
    name = "catalogue"

    def parse(self, response: Response) -> Iterator[Any]:
        yield {"url": response.url}

    def parse_item(self, response: Response, page: int) -> Iterator[Any]:
        yield {"page": page}


def test_a_callable_second_argument_is_the_callback() -> None:
    spider = Catalogue()
    request = Request("http://site.test/", spider.parse)  # Scrapy's order
    assert (request.callback, request.method) == (spider.parse, "GET")
    scrapy_order = Request("http://site.test/", spider.parse, "POST")
    assert (scrapy_order.callback, scrapy_order.method) == (spider.parse, "POST")
    ours = Request("http://site.test/", "PUT", {"A": "b"})  # netdisco's order, as before
    assert (ours.method, ours.headers, ours.callback) == ("PUT", {"A": "b"}, None)
    with pytest.raises(TypeError, match="two callbacks"):
        Request("http://site.test/", spider.parse, callback=spider.parse)


@pytest.mark.parametrize("codec", [encode, pack])
def test_cb_kwargs_travel_with_the_request(codec: Any) -> None:
    spider = Catalogue()
    request = Request("http://site.test/", spider.parse_item, cb_kwargs={"page": 3})
    back = decode(codec(request, spider), spider)
    assert (back.callback, back.cb_kwargs) == (spider.parse_item, {"page": 3})
    assert decode(codec(Request("http://site.test/"), spider), spider).cb_kwargs == {}


async def test_start_requests_and_cb_kwargs_and_closed_in_a_crawl() -> None:
    reasons: list[str] = []

    class Legacy(Catalogue):
        def start_requests(self) -> Iterator[Request]:
            yield Request("http://site.test/a", self.parse_item, cb_kwargs={"page": 7})

        def closed(self, reason: str) -> None:
            reasons.append(reason)

    items: list[Any] = []
    handler = MockHandler.pages({"http://site.test/a": "<p>a</p>"})
    crawler = Crawler(Legacy(), {"obey_robots": False}, download_handler=handler)
    crawler.items.subscribe(items.append)
    await crawler.run()
    assert (items, reasons) == ([{"page": 7}], ["finished"])


async def test_closed_says_shutdown_when_stopped() -> None:
    reasons: list[str] = []

    class Stopped(Catalogue):
        start_urls = ("http://site.test/a",)

        async def closed(self, reason: str) -> None:
            reasons.append(reason)

    crawler = Crawler(Stopped(), {"obey_robots": False}, download_handler=MockHandler.pages({}))
    await crawler.start()
    crawler.pause()
    await crawler.stop()
    assert reasons == ["shutdown"]


def test_the_spider_logger_is_bound_to_its_name(caplog: pytest.LogCaptureFixture) -> None:
    spider = Catalogue()
    assert spider.logger._context["spider"] == "catalogue"
    spider.logger.info("page %s of %d", "a", 3)
    spider.log("a debug line", logging.INFO)


def test_response_json() -> None:
    assert page(b'{"a": [1, "\xc3\xa9"]}', content_type="application/json").json() == {
        "a": [1, "é"]
    }
    with pytest.raises(ValueError):  # noqa: PT011 - json's own error
        page(b"<html>").json()


@dataclasses.dataclass
class Book:
    title: str


@attrs.define
class Film:
    title: str


class Album(Item):
    title = Field()
    year = Field(serializer=int)


@pytest.mark.parametrize(
    "item",
    [
        MappingProxyType({"title": "t"}),
        UserDict({"title": "t"}),
        Book("t"),
        Film("t"),
        Album(title="t"),
    ],
    ids=["mapping", "userdict", "dataclass", "attrs", "Item"],
)
def test_every_kind_of_item_is_written_as_its_fields(item: Any) -> None:
    assert json.loads(json_line(item)) == {"title": "t"}


def test_an_item_refuses_undeclared_fields() -> None:
    album = Album(title="t")
    with pytest.raises(KeyError, match="Album does not support field: artist"):
        album["artist"] = "x"
    with pytest.raises(AttributeError, match=r"use item\['title'\]"):
        album.title = "u"  # type: ignore[assignment]
    assert Album.fields["year"] == {"serializer": int}


def test_item_loaders_take_a_response() -> None:
    response = page(b"<h1> Kind of Blue </h1><h1>Other</h1>")
    assert weakref.ref(response)() is response
    loader = itemloaders.ItemLoader(response=response, selector=response.selector)
    loader.add_css("title", "h1::text")
    assert loader.load_item() == {"title": [" Kind of Blue ", "Other"]}

    class AlbumLoader(ItemLoader):
        default_output_processor = TakeFirst()

    ours = AlbumLoader(item=Album(), response=response)
    ours.add_css("title", "h1::text")
    assert dict(ours.load_item()) == {"title": " Kind of Blue "}
    assert ours.context["response"] is response


def test_startproject_settings_are_accepted_and_scrapy_tables_read() -> None:
    settings = from_mapping({
        "BOT_NAME": "shop", "NEWSPIDER_MODULE": "shop.spiders", "SPIDER_MODULES": ["shop.spiders"],
        "FEED_EXPORT_ENCODING": "utf-8", "REQUEST_FINGERPRINTER_IMPLEMENTATION": "2.7",
        "TWISTED_REACTOR": "twisted.internet.asyncioreactor.AsyncioSelectorReactor",
        "ADDONS": {}, "JOBDIR": "crawls/shop-1",
        "ITEM_PIPELINES": {"shop.pipelines.Late": 800, "shop.pipelines.Early": 100, "x.Off": None},
    })  # fmt: skip
    assert settings.state_dir == "crawls/shop-1"
    assert settings.item_pipelines == ("shop.pipelines.Early", "shop.pipelines.Late")
    with pytest.raises(ConfigError, match="ITEM_PIPELINES: expected a table"):
        from_mapping({"ITEM_PIPELINES": {"a.B": "first"}})


def test_form_request_from_response_fills_the_form_as_scrapy() -> None:
    response = page(FORMS)
    request = FormRequest.from_response(response, formid="login", formdata={"user": "ann"})
    assert (request.method, request.url) == ("POST", "http://site.test/login?next=%2F")
    assert request.headers["Content-Type"] == "application/x-www-form-urlencoded"
    assert fields(request) == [("csrf", "T1"), ("terms", "yes"), ("lang", "en"), ("note", "hi"),
                               ("go", "Log in"), ("user", "ann")]  # fmt: skip
    for chosen in ({"formname": "login"}, {"formnumber": 1}, {"formcss": "form.auth"},
                   {"formxpath": "//input[@name='csrf']"}):  # fmt: skip
        assert FormRequest.from_response(response, **chosen).url.startswith(
            "http://site.test/login"
        )
    clicked = FormRequest.from_response(response, formnumber=1, clickdata={"value": "Register"},
                                        formdata={"csrf": None})  # fmt: skip
    assert fields(clicked) == [("user", ""), ("terms", "yes"), ("lang", "en"), ("note", "hi"),
                              ("go", "Register")]  # fmt: skip
    search = FormRequest.from_response(response, formdata={"q": "a b"})  # the first form: a GET
    assert (search.method, search.url, search.body) == (
        "GET",
        "http://site.test/search?q=a+b",
        None,
    )
    with pytest.raises(ValueError, match="no <form> element found"):
        FormRequest.from_response(page(b"<p>none</p>"))
    with pytest.raises(IndexError, match="form number 5"):
        FormRequest.from_response(response, formnumber=5)


def test_form_request_with_formdata() -> None:
    posted = FormRequest("http://site.test/s", formdata={"q": "x", "tags": ["a", "b"]})
    assert (posted.method, fields(posted)) == ("POST", [("q", "x"), ("tags", "a"), ("tags", "b")])
    got = FormRequest("http://site.test/s?p=1", formdata={"q": "x"}, method="GET")
    assert (got.url, got.body) == ("http://site.test/s?p=1&q=x", None)


def test_the_summary_names_the_errors_callbacks_raised() -> None:
    crawler = Crawler(Catalogue(), {"obey_robots": False})
    for exc in (ValueError("a"), ValueError("b"), KeyError("price")):
        crawler.stats.spider_error(exc)
    crawler.stats.succeeded = 3
    data = summary(crawler)
    assert data["spider_errors"] == {"ValueError": 2, "KeyError": 1}
    assert "  spider   callbacks raised ValueError x2, KeyError x1" in render(data)
    assert exit_code(crawler, []) == 1
    crawler.stats.succeeded = 4  # one page's callback did not raise
    assert exit_code(crawler, []) == 0
