"""Scrapy's habits, accepted or explained (issue 47, point 3): the module paths public
spiders import, a spider file that imports its own package, ``-L``/``--nolog``,
``netdisco list``, settings.py's LOG_LEVEL and LOG_FILE, notes about settings.py, and exit
0 for a crawl that ran and found nothing. Each message quoted in the issue is checked
gone, replaced by one that says what to do."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

import netdisco
from tests.netdisco.scrapy_reference.runs import PROJECT
from tests.netdisco.scrapy_reference.site import serve

NETDISCO = str(Path(sys.executable).with_name("netdisco"))


@pytest.fixture
async def site() -> AsyncIterator[str]:
    runner, base = await serve()
    yield base
    await runner.cleanup()


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A copy of the reference startproject project; its root (where scrapy.cfg is)."""
    root = tmp_path / "bookproj"
    shutil.copytree(PROJECT, root, ignore=shutil.ignore_patterns("__pycache__"))
    return root


async def netdisco_run(*args: str, cwd: Path) -> tuple[int, str]:
    """``netdisco ARGS`` in ``cwd``: its exit status and what it printed (both streams)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("NETDISCO_")}
    process = await asyncio.create_subprocess_exec(
        NETDISCO, *args, cwd=cwd, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    out, _ = await asyncio.wait_for(process.communicate(), 40)
    assert process.returncode is not None
    return process.returncode, out.decode()


def write_spider(project: Path, name: str, body: str) -> None:
    (project / "bookproj/spiders" / f"{name}.py").write_text(body)


# --- module paths ----------------------------------------------------------------------------


def test_import_netdisco_as_scrapy_reaches_scrapys_submodules() -> None:
    """Was: AttributeError: module 'netdisco' has no attribute 'item'."""
    scrapy = netdisco
    assert scrapy.item.Item is netdisco.Item
    assert scrapy.item.Field is netdisco.Field
    assert scrapy.http.Request is netdisco.Request
    assert scrapy.http.HtmlResponse is scrapy.http.TextResponse is netdisco.Response
    assert scrapy.http.FormRequest is netdisco.FormRequest
    assert scrapy.spiders.CrawlSpider is netdisco.CrawlSpider
    assert scrapy.linkextractors.LinkExtractor is netdisco.LinkExtractor
    assert scrapy.loader.processors.TakeFirst.__module__ == "itemloaders.processors"
    assert callable(scrapy.utils.project.get_project_settings)
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        _ = scrapy.nothing


FOLLOW = '''import scrapy
from scrapy.http import HtmlResponse, Request
from scrapy.item import Field, Item
from scrapy.loader import ItemLoader
from scrapy.loader.processors import TakeFirst
from scrapy.utils.conf import closest_scrapy_cfg
from scrapy.utils.project import get_project_settings


class Book(Item):
    title = Field(output_processor=TakeFirst())
    cfg = Field(output_processor=TakeFirst())
    bot = Field(output_processor=TakeFirst())
    price = Field(output_processor=TakeFirst())  # the project's pipelines want both
    stock = Field(output_processor=TakeFirst())
    available = Field()


class FollowBookLinks(scrapy.Spider):
    name = "follow_book_links"

    def start_requests(self):
        yield Request(f"{self.site}/catalogue/book-1.html", self.parse)

    def parse(self, response):
        assert isinstance(response, HtmlResponse)
        loader = ItemLoader(item=Book(), response=response)
        loader.add_css("title", "h1::text")
        loader.add_value("cfg", closest_scrapy_cfg())
        loader.add_value("bot", get_project_settings()["BOT_NAME"])
        loader.add_value("price", 1.0)
        loader.add_value("stock", 1)
        yield loader.load_item()
'''


async def test_a_project_spider_imports_the_module_paths_public_spiders_use(
    project: Path, site: str
) -> None:
    """Was: ``from scrapy.utils.conf import closest_scrapy_cfg`` refused, with a hint to
    run ``netdisco crawl NAME`` beside scrapy.cfg, where it ran."""
    write_spider(project, "follow", FOLLOW)
    code, output = await netdisco_run(
        "crawl", "follow_book_links", f"-asite={site}", "-O", "out.jsonl", cwd=project
    )
    assert code == 0, output
    item = json.loads((project / "out.jsonl").read_text())
    assert (item["bot"], item["cfg"]) == ("bookproj", str(project / "scrapy.cfg")), output


@pytest.mark.parametrize(
    ("statement", "lacked"),
    [
        ("from scrapy.crawler import CrawlerProcess", "scrapy.crawler"),
        ("from scrapy.exceptions import CloseSpider", "scrapy.exceptions.CloseSpider"),
    ],
)
async def test_a_scrapy_name_netdisco_lacks_is_named_with_what_to_do(
    project: Path, statement: str, lacked: str
) -> None:
    write_spider(project, "lacking", f"{statement}\n")
    code, output = await netdisco_run("crawl", "books", cwd=project)
    assert code == 2, output
    assert str(project / "bookproj/spiders/lacking.py") + ", line 1" in output
    assert f"netdisco has no counterpart of {lacked}" in output
    assert "remove that import and the code that uses it, or run this spider with" in output
    assert "beside scrapy.cfg" not in output  # the hint to do what was being done


# --- a spider file and the current directory ---------------------------------------------------


async def test_a_spider_file_imports_its_own_package_from_the_current_directory(
    tmp_path: Path, site: str
) -> None:
    """Was: refused, saying "the current directory is searched already", which it was not."""
    package = tmp_path / "shop"
    (package / "spiders").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "spiders/__init__.py").write_text("")
    (package / "pages.py").write_text("FIRST = '/catalogue/book-1.html'\n")
    (package / "spiders/one.py").write_text(
        "import netdisco as scrapy\n"
        "from shop.pages import FIRST\n\n\n"
        "class One(scrapy.Spider):\n"
        "    name = 'one'\n\n"
        "    def start_requests(self):\n"
        "        yield scrapy.Request(self.site + FIRST, self.parse)\n\n"
        "    def parse(self, response):\n"
        "        yield {'title': response.css('h1::text').get()}\n"
    )
    code, output = await netdisco_run(
        "crawl", "shop/spiders/one.py:One", f"-asite={site}", "-O", "out.jsonl", cwd=tmp_path
    )
    assert code == 0, output
    assert '"title"' in (tmp_path / "out.jsonl").read_text()
    (package / "spiders/one.py").write_text("import shop.missing\n")
    code, output = await netdisco_run("crawl", "shop/spiders/one.py:One", cwd=tmp_path)
    assert code == 2, output
    assert "searched already" not in output
    assert f"the current directory ({tmp_path}) are the only ones searched" in output
