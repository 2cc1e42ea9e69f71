"""Scrapy spiders move over: each reference spider runs on netdisco with only its imports
changed (or, in its Scrapy project, unchanged by ``netdisco crawl NAME``), and writes
exactly the items real Scrapy wrote for it on the same site (``scrapy_reference/``)."""

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

from tests.netdisco.scrapy_reference.runs import PROJECT, RUNS, SPIDERS, Run, normalised
from tests.netdisco.scrapy_reference.site import serve

NETDISCO = str(Path(sys.executable).with_name("netdisco"))
#: the only lines a spider file changes to move over
IMPORTS = {
    "import scrapy": "import netdisco as scrapy",
    "from scrapy.linkextractors import LinkExtractor": "from netdisco import LinkExtractor",
    "from scrapy.spiders import CrawlSpider, Rule": "from netdisco import CrawlSpider, Rule",
}


@pytest.fixture
async def reference_site() -> AsyncIterator[str]:
    runner, base = await serve()
    yield base
    await runner.cleanup()


def ported(source: str) -> str:
    """``source`` with its Scrapy imports changed to netdisco's, and nothing else."""
    lines = [IMPORTS.get(line, line) for line in source.splitlines()]
    assert lines != source.splitlines(), "a reference spider imports scrapy"
    return "\n".join(lines) + "\n"


async def netdisco_crawl(*args: str, cwd: Path) -> tuple[int, str]:
    """``netdisco crawl ARGS`` in ``cwd``; its exit status and what it printed."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("NETDISCO_")}
    process = await asyncio.create_subprocess_exec(
        NETDISCO, "crawl", *args, cwd=cwd, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    out, _ = await asyncio.wait_for(process.communicate(), 40)
    assert process.returncode is not None
    return process.returncode, out.decode()


def place(run: Run, tmp_path: Path) -> tuple[str, Path]:
    """The spider reference and the directory to crawl from: the project copied as it is,
    or the spider file with its imports changed."""
    if run.in_project:
        shutil.copytree(
            PROJECT, tmp_path / "bookproj", ignore=shutil.ignore_patterns("__pycache__")
        )
        return run.spider, tmp_path / "bookproj"
    file, _, cls = run.spider.partition(":")
    (tmp_path / file).write_text(ported((SPIDERS / file).read_text()))
    return f"{file}:{cls}", tmp_path


@pytest.mark.parametrize("run", RUNS, ids=[run.name for run in RUNS])
async def test_the_items_are_scrapys(run: Run, reference_site: str, tmp_path: Path) -> None:
    spider, cwd = place(run, tmp_path)
    given = {"site": reference_site, **run.args}
    if run.name == "api":
        given["closed_file"] = str(tmp_path / "closed.txt")
    args = [f"-a{name}={value}" for name, value in given.items()]
    code, output = await netdisco_crawl(spider, *args, "-O", str(tmp_path / "items.jsonl"), cwd=cwd)
    assert code == 0, output
    items = normalised((tmp_path / "items.jsonl").read_text(), reference_site)
    assert items == run.expected.read_text().splitlines()
    if run.name == "api":  # closed(reason), once, at the end
        assert (tmp_path / "closed.txt").read_text() == "finished"
    if run.in_project:
        assert "setting_ignored" in output
        assert "TWISTED_REACTOR" in output
        assert "project_settings_unused" in output
        assert "PRICE_RATE" in output


async def test_a_crawl_whose_callbacks_all_raise_exits_1(
    reference_site: str, tmp_path: Path
) -> None:
    """Today: "finished", 0 items, exit 0; and a string yielded was written as an item."""
    (tmp_path / "broken.py").write_text(
        "import netdisco as scrapy\n\n\n"
        "class Broken(scrapy.Spider):\n"
        "    name = 'broken'\n\n"
        "    def __init__(self, site, **kwargs):\n"
        "        super().__init__(**kwargs)\n"
        "        self.start_urls = [f'{site}/quotes/page/1/', f'{site}/quotes/page/2/']\n\n"
        "    def parse(self, response):\n"
        "        yield 'just a string'\n"
        "        raise ValueError('the selectors changed')\n"
    )
    code, output = await netdisco_crawl(
        "broken.py:Broken", f"-asite={reference_site}", "-O", "items.jsonl", "--log-json",
        cwd=tmp_path,
    )  # fmt: skip
    assert code == 1, output
    summary = _summary(output)
    assert summary["spider_errors"] == {"NotAnItem": 2, "ValueError": 2}
    assert (summary["items"], (tmp_path / "items.jsonl").read_text()) == (0, "")
    assert "builtins.str" in output  # the refused value's type is named


def _summary(output: str) -> dict[str, Any]:
    line = next(line for line in output.splitlines() if '"crawl_summary"' in line)
    found: dict[str, Any] = json.loads(line[line.index("{") :])
    return found


async def test_a_project_spider_is_found_by_name_or_the_names_are_listed(tmp_path: Path) -> None:
    _, project = place(RUNS[-1], tmp_path)
    code, output = await netdisco_crawl("bookz", cwd=project / "bookproj")  # below scrapy.cfg
    assert code == 2
    assert "no spider named 'bookz' in SPIDER_MODULES ['bookproj.spiders']" in output
    assert "the spiders are: authors, books" in output
    copy = (project / "bookproj/spiders/books.py").read_text().replace("BooksSpider", "Again")
    (project / "bookproj/spiders/again.py").write_text(copy)
    code, output = await netdisco_crawl("books", cwd=project)
    assert code == 2
    assert "two spiders are named 'books': bookproj.spiders.again:Again, bookproj" in output
    code, output = await netdisco_crawl("books", cwd=tmp_path)  # no scrapy.cfg here
    assert code == 2
    assert "the name of a spider beside scrapy.cfg (none in" in output


async def test_get_project_settings_reads_settings_py(tmp_path: Path) -> None:
    _, project = place(RUNS[-1], tmp_path)
    script = (
        "from netdisco.crawl.scrapyproject import find_project\n"
        "find_project()\n"
        "from scrapy.utils.project import get_project_settings\n"
        "s = get_project_settings()\n"
        "print(s['BOT_NAME'], s.getint('PRICE_RATE'), s.getbool('ROBOTSTXT_OBEY'))\n"
    )
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-c", script, cwd=project, stdout=asyncio.subprocess.PIPE
    )
    out, _ = await process.communicate()
    assert out.decode().split() == ["bookproj", "2", "True"]


@pytest.mark.redis
async def test_a_project_spider_on_two_processes_writes_scrapys_items(
    reference_site: str, tmp_path: Path
) -> None:
    """``-j 2``: each worker process loads the project, its pipelines and settings.py."""
    run = RUNS[-1]
    spider, cwd = place(run, tmp_path)
    out = tmp_path / "items.jsonl"
    code, output = await netdisco_crawl(
        spider, f"-asite={reference_site}", "-j", "2", "-O", str(out), cwd=cwd
    )
    assert code == 0, output
    assert normalised(out.read_text(), reference_site) == run.expected.read_text().splitlines()
