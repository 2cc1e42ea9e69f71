"""Item schemas: dataclasses, attrs classes and pydantic models checked as items are
yielded; invalid items counted per field, kept, dropped or failing the crawl; CSV columns
from the schema. The crawls run against a loopback server."""

from __future__ import annotations

import csv
import dataclasses
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import attrs
import pydantic
import pytest
from aiohttp import web

from netdisco import Crawler, Response, Settings, Spider
from netdisco.crawl.feeds import cli_feed
from netdisco.crawl.schemas import check, field_names
from netdisco.exceptions import ConfigError, InvalidItem
from netdisco.testing import serve


@dataclasses.dataclass
class Product:
    title: str
    price: float
    tags: list[str] = dataclasses.field(default_factory=list)
    note: str | None = None


@attrs.define
class Priced:
    title: str
    price: float = attrs.field(validator=attrs.validators.ge(0))


class Model(pydantic.BaseModel):
    title: str
    price: float


def test_a_dict_is_checked_against_a_dataclass_field_by_field() -> None:
    good, problems = check({"title": "a", "price": 1.5, "tags": ["x"]}, Product)
    assert problems == []
    assert good == Product("a", 1.5, ["x"])  # built from the mapping
    _, problems = check({"price": "1.5", "tags": ["x", 2], "colour": "red"}, Product)
    assert {p.field for p in problems} == {"title", "price", "tags", "colour"}
    reasons = {p.field: p.reason for p in problems}
    assert reasons["title"] == "missing"
    assert reasons["colour"] == "not a field of the schema"
    assert reasons["tags"].startswith("item 1 of list")  # every element, not the first only


def test_an_instance_of_a_dataclass_is_checked_too() -> None:
    assert check(Product("a", 2.0), Product)[1] == []
    wrong = Product("a", "free")  # type: ignore[arg-type]  # what a spider's bug looks like
    assert [p.field for p in check(wrong, Product)[1]] == ["price"]


def test_attrs_validators_and_pydantic_models_speak_for_themselves() -> None:
    assert check({"title": "a", "price": 1.0}, Priced) == (Priced("a", 1.0), [])
    _, problems = check({"title": "a", "price": -1.0}, Priced)
    assert len(problems) == 1
    assert "price" in problems[0].reason
    item, problems = check({"title": "a", "price": "2.5"}, Model)
    assert (item, problems) == (Model(title="a", price=2.5), [])
    _, problems = check({"price": "x"}, Model)
    assert {p.field for p in problems} == {"title", "price"}
    assert field_names(Model) == ["title", "price"] == field_names(Priced)


class Shop(Spider):
    name = "shop"
    item_schema = Product

    def parse(self, response: Response) -> Iterator[Any]:
        n = int(response.url.rsplit("/", 1)[-1] or 0)
        if n == 0:
            yield from (response.follow(f"/{i}") for i in range(1, 7))
        elif n % 2:
            yield {"title": f"p{n}", "price": n * 1.0, "tags": ["t"]}
        else:
            yield {"title": f"p{n}", "price": "n/a"}  # invalid: price


@pytest.fixture
async def base() -> AsyncIterator[str]:
    async def page(request: web.Request) -> web.Response:
        return web.Response(text="<html><body>x</body></html>", content_type="text/html")

    app = web.Application()
    app.router.add_get("/{tail:.*}", page)
    async with serve(app) as url:
        yield url


async def _crawl(base: str, tmp_path: Path, mode: str) -> tuple[Crawler, Path]:
    feed = tmp_path / f"{mode}.csv"
    spider = Shop()
    spider.start_urls = [f"{base}/"]  # type: ignore[misc]  # a test's own start
    settings = Settings(
        obey_robots=False, invalid_items=mode, feeds=(cli_feed(str(feed), overwrite=True),)
    )
    crawler = Crawler(spider, settings)
    await crawler.run()
    return crawler, feed


@pytest.mark.parametrize("mode", ["keep", "drop"])
async def test_invalid_items_are_counted_and_kept_or_dropped(
    base: str, tmp_path: Path, mode: str
) -> None:
    crawler, feed = await _crawl(base, tmp_path, mode)
    assert crawler.state.value == "finished"
    assert (crawler.stats.items_invalid, crawler.stats.invalid_fields) == (3, {"price": 3})
    with feed.open(newline="") as handle:
        rows = list(csv.reader(handle))
    assert rows[0] == ["title", "price", "tags", "note"]  # the schema's columns
    prices = sorted(row[1] for row in rows[1:])
    valid = ["1.0", "3.0", "5.0"]
    assert prices == (sorted(valid + ["n/a"] * 3) if mode == "keep" else valid)
    assert crawler.stats.as_dict()["items_invalid"] == 3


async def test_invalid_items_fail_the_crawl_when_asked(base: str, tmp_path: Path) -> None:
    crawler, _ = await _crawl(base, tmp_path, "fail")
    assert crawler.state.value == "failed"
    assert isinstance(crawler.failure, InvalidItem)
    assert "does not fit Product: price" in str(crawler.failure)


def test_a_schema_that_is_not_one_is_refused_at_start() -> None:
    class Bad(Spider):
        item_schema = dict

    with pytest.raises(ConfigError, match="item_schema"):
        Crawler(Bad(), Settings())
    with pytest.raises(ConfigError, match="invalid_items"):
        Settings(invalid_items="ignore")


def test_items_become_json_whatever_their_class() -> None:
    from netdisco.crawl.pipelines import json_line

    for item in (Product("a", 1.0), Priced("a", 1.0), Model(title="a", price=1.0)):
        assert json.loads(json_line(item))["title"] == "a"
