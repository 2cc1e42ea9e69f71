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
from typing import Any

import pytest

import netdisco
from netdisco.crawl.scrapyproject import SUBMODULES, scrapy_modules
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
    made = {name.split(".")[1] for name in scrapy_modules() if name.startswith("scrapy.")}
    assert made == SUBMODULES  # what netdisco's __getattr__ knows without making them


FOLLOW = """import scrapy
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
"""


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
        ("from scrapy import signals", "scrapy.signals"),
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


# --- the log: -L, --nolog, LOG_LEVEL, LOG_FILE, and the notes about settings.py ---------------


def log_lines(output: str) -> list[dict[str, Any]]:
    """The JSON log lines of ``output``, the closing summary left out."""
    lines = [json.loads(line) for line in output.splitlines() if line.startswith("{")]
    return [line for line in lines if line.get("event") != "crawl_summary"]


def set_in_settings_py(project: Path, text: str) -> None:
    settings = project / "bookproj/settings.py"
    settings.write_text(settings.read_text() + text)


@pytest.mark.parametrize(
    "flags", [("-L", "WARNING"), ("--loglevel", "warning"), ("--log-level", "WARNING")]
)
async def test_scrapys_log_level_flags_are_taken(
    project: Path, site: str, flags: tuple[str, str]
) -> None:
    """Was: ``-L WARNING`` refused (exit 2) as an unknown argument."""
    code, output = await netdisco_run(
        "crawl", "books", f"-asite={site}", *flags, "--log-json", cwd=project
    )
    assert code == 0, output
    levels = {line["level"] for line in log_lines(output)}
    assert levels == {"warning"}, output  # the notes about settings.py, and no info


async def test_nolog_logs_nothing_but_the_summary(project: Path, site: str) -> None:
    code, output = await netdisco_run(
        "--nolog", "crawl", "books", f"-asite={site}", "--log-json", cwd=project
    )
    assert code == 0, output
    assert log_lines(output) == []
    assert '"event": "crawl_summary"' in output
    set_in_settings_py(project, "LOG_ENABLED = False\n")  # Scrapy's --nolog, in settings.py
    code, output = await netdisco_run("crawl", "books", f"-asite={site}", "--log-json", cwd=project)
    assert (code, log_lines(output)) == (0, []), output
    code, output = await netdisco_run(  # -s over settings.py, as in Scrapy
        "crawl", "books", f"-asite={site}", "-s", "LOG_ENABLED=true", "-s", "LOG_LEVEL=WARNING",
        "--log-json", cwd=project,
    )  # fmt: skip
    assert code == 0, output
    assert {line["level"] for line in log_lines(output)} == {"warning"}, output


async def test_settings_py_log_level_is_honoured_and_its_notes_are_warnings(
    project: Path, site: str
) -> None:
    """Was: ``LOG_LEVEL = 'WARNING'`` in settings.py stopped the crawl with exit 2; the
    notes about settings.py were info lines, named ``custom_settings.X``."""
    set_in_settings_py(project, "LOG_LEVEL = 'WARNING'\n")
    code, output = await netdisco_run("crawl", "books", f"-asite={site}", "--log-json", cwd=project)
    assert code == 0, output
    lines = log_lines(output)
    assert {line["level"] for line in lines} == {"warning"}, output
    notes = {line["key"]: line["event"] for line in lines if "key" in line}
    assert notes["settings.py: BOT_NAME"] == "setting_ignored"
    assert notes["settings.py: DOWNLOAD_DELAY"] == "setting_alias"
    assert not any(key.startswith("custom_settings.") for key in notes)
    code, output = await netdisco_run(  # the command line's level wins
        "crawl", "books", f"-asite={site}", "-L", "INFO", "--log-json", cwd=project
    )
    assert code == 0, output
    assert "info" in {line["level"] for line in log_lines(output)}


async def test_settings_py_log_file_takes_the_log(project: Path, site: str) -> None:
    set_in_settings_py(project, "LOG_FILE = 'crawl.log'\nLOG_LEVEL = 'INFO'\n")
    code, output = await netdisco_run("crawl", "books", f"-asite={site}", cwd=project)
    assert code == 0, output
    assert log_lines(output) == []  # the summary alone, on stderr
    logged = log_lines((project / "crawl.log").read_text())
    assert "spider_closed" in {line["event"] for line in logged}


async def test_a_bad_log_level_in_settings_py_says_what_is_expected(project: Path) -> None:
    set_in_settings_py(project, "LOG_LEVEL = 'LOUD'\n")
    code, output = await netdisco_run("crawl", "books", cwd=project)
    assert code == 2, output
    assert "settings.py: LOG_LEVEL: expected one of DEBUG, INFO, WARNING, ERROR, CRITICAL" in output


# --- netdisco list -----------------------------------------------------------------------------


async def test_list_prints_the_spiders_of_the_project_here(project: Path, tmp_path: Path) -> None:
    """Was: ``netdisco list`` refused as an unknown command."""
    for where in (project, project / "bookproj"):  # beside scrapy.cfg, or below it
        code, output = await netdisco_run("list", cwd=where)
        assert (code, output) == (0, "authors\nbooks\n")
    own = tmp_path / "own"
    (own / "shop").mkdir(parents=True)
    (own / "requirements.txt").write_text("")
    (own / "shop/__init__.py").write_text("")
    (own / "shop/spiders.py").write_text(
        "import netdisco\n\n\nclass Catalogue(netdisco.Spider):\n    name = 'catalogue'\n\n\n"
        "class Sale(Catalogue):\n    name = 'sale'\n"
    )
    code, output = await netdisco_run("list", cwd=own)
    assert code == 0, output
    assert output.splitlines() == [
        "catalogue  shop.spiders:Catalogue",
        "sale       shop.spiders:Sale",
    ]
    empty = tmp_path / "empty"
    empty.mkdir()
    code, output = await netdisco_run("list", cwd=empty)
    assert code == 2
    assert "no project here: netdisco list reads a Scrapy project (scrapy.cfg" in output


# --- exit status -------------------------------------------------------------------------------


async def test_a_crawl_that_ran_and_found_nothing_exits_0(tmp_path: Path, site: str) -> None:
    """Was: exit 1 for ``-a tag=humor`` on a site with no such tag (its page: 404); Scrapy
    exits 0. A site that does not answer still exits 1 (test_cli_summary)."""
    (tmp_path / "quotes.py").write_text(
        "import netdisco as scrapy\n\n\n"
        "class Quotes(scrapy.Spider):\n"
        "    name = 'quotes'\n\n"
        "    def start_requests(self):\n"
        "        yield scrapy.Request(f'{self.site}/quotes/tag/{self.tag}/', self.parse)\n\n"
        "    def parse(self, response):\n"
        "        yield from ({'text': q} for q in response.css('span.text::text').getall())\n"
    )
    code, output = await netdisco_run(
        "crawl", "quotes.py:Quotes", f"-asite={site}", "-atag=humor", "--log-json", cwd=tmp_path
    )
    summary = next(line for line in output.splitlines() if '"crawl_summary"' in line)
    assert (code, json.loads(summary)["errors"]) == (0, {"HTTP 404": 1}), output


async def test_a_spider_file_reads_the_project_settings_beside_it(project: Path) -> None:
    """Was: ``get_project_settings`` had no counterpart for a spider file."""
    (project / "probe.py").write_text(
        "import netdisco as scrapy\n"
        "from netdisco import get_project_settings\n\n"
        "print(get_project_settings().getint('PRICE_RATE'),\n"
        "      scrapy.utils.project.get_project_settings()['BOT_NAME'])\n"
    )
    process = await asyncio.create_subprocess_exec(
        sys.executable, "probe.py", cwd=project, stdout=asyncio.subprocess.PIPE
    )
    out, _ = await asyncio.wait_for(process.communicate(), 40)
    assert out.decode().split() == ["2", "bookproj"]
