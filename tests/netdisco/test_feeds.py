"""Feeds from engine.toml and from ``netdisco crawl -o/-O``: jsonl, json, csv, SQLite."""

from __future__ import annotations

import asyncio
import csv
import json
import signal
import sqlite3
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from netdisco import Crawler, Settings, Spider
from netdisco.crawl.feeds import FeedPipeline, cli_feed, parse_feeds
from netdisco.exceptions import ConfigError, FeedError
from netdisco.testing import eventually, free_port, serve
from tests.netdisco.sites import linking_app
from tests.netdisco.test_cli import run_cli
from tests.netdisco.test_engine_cli import get_json, stopped_at_exit
from tests.netdisco.test_middleware import PAGES, fan

SPIDER = """
from netdisco import Spider

class Pages(Spider):
    name = "pages"
    start_urls = ["{base}/"]

    def parse(self, response):
        number = response.url.rsplit("/", 1)[-1] or "root"
        yield {{"url": response.url, "n": number, "tags": ["a", "b"]}}
        yield from response.follow_all(css="a")
"""


@pytest.fixture
async def base() -> AsyncIterator[str]:
    async with serve(linking_app(fan)) as url:
        yield url


def expected(base: str) -> list[str]:
    return sorted([f"{base}/", *(f"{base}/p/{n}" for n in range(PAGES))])


def jsonl_urls(path: Path) -> list[str]:
    return sorted(json.loads(line)["url"] for line in path.read_text().splitlines())


def csv_rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


async def test_engine_toml_feeds_in_every_format_with_templates(tmp_path: Path, base: str) -> None:
    (tmp_path / "spiders.py").write_text(SPIDER.format(base=base))
    out = tmp_path / "out"
    port = free_port()
    config = tmp_path / "engine.toml"
    config.write_text(
        f'[engine]\nid = "e1"\nport = {port}\n[[spiders]]\nspider = "{tmp_path}/spiders.py:Pages"\n'
        "[spiders.settings]\nobey_robots = false\n"
        f'[spiders.settings.feeds."{out}/{{spider}}-{{engine}}.jsonl"]\n'
        f'[spiders.settings.feeds."{out}/new/{{spider}}.json"]\noverwrite = true\n'
        f'[spiders.settings.feeds."{out}/{{engine}}/{{time}}.csv"]\nfields = ["n", "url"]\n'
        f'[spiders.settings.feeds."sqlite://{out}/items.db"]\n'
    )
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "netdisco.cli", "engine", "--config", str(config),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    async with stopped_at_exit(proc), aiohttp.ClientSession() as session:
        url = f"http://127.0.0.1:{port}/netdiscovery/spiders/pages"

        async def finished() -> bool:
            status = await get_json(session, url)
            return isinstance(status, dict) and status["state"] == "finished"

        await eventually(finished, "the spider finished")
        proc.send_signal(signal.SIGTERM)
        _, stderr = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 0, stderr.decode()
    assert jsonl_urls(out / "pages-e1.jsonl") == expected(base)
    array = json.loads((out / "new" / "pages.json").read_text())
    assert sorted(item["url"] for item in array) == expected(base)
    assert array[0]["tags"] == ["a", "b"]
    [stamped] = (out / "e1").glob("*.csv")
    rows = csv_rows(stamped)
    assert list(rows[0]) == ["n", "url"]  # the declared fields, in their order
    assert sorted(row["url"] for row in rows) == expected(base)
    with sqlite3.connect(out / "items.db") as db:
        stored = db.execute("SELECT url, n, tags FROM pages").fetchall()
    assert sorted(row[0] for row in stored) == expected(base)
    assert {row[2] for row in stored} == {'["a", "b"]'}


async def test_cli_o_appends_and_O_overwrites_in_three_formats(tmp_path: Path, base: str) -> None:
    spider = tmp_path / "spiders.py"
    spider.write_text(SPIDER.format(base=base))
    ref = f"{spider}:Pages"
    lines, array, table = (
        tmp_path / "a" / "items.jsonl",
        tmp_path / "items.json",
        tmp_path / "t.csv",
    )
    args = ("-s", "obey_robots=false", "-o", str(lines), "-O", str(array), "-o", str(table))
    for _ in range(2):
        code, _, err = await run_cli("crawl", ref, *args)
        assert code == 0, err
    assert jsonl_urls(lines) == sorted(expected(base) * 2)  # -o appended
    assert sorted(i["url"] for i in json.loads(array.read_text())) == expected(base)  # -O
    rows = csv_rows(table)  # appended: one header, twice the rows
    assert sorted(row["url"] for row in rows) == sorted(expected(base) * 2)
    assert table.read_text().count("url,n,tags") == 1
    code, out, err = await run_cli("crawl", ref, "-s", "obey_robots=false", "--output=-:csv")
    assert code == 0, err
    assert sorted(row["url"] for row in csv.DictReader(out.splitlines())) == expected(base)


async def test_an_unwritable_feed_exits_2_naming_it(tmp_path: Path, base: str) -> None:
    spider = tmp_path / "spiders.py"
    spider.write_text(SPIDER.format(base=base))
    blocker = tmp_path / "file"
    blocker.write_text("a file, not a directory")
    target = blocker / "items.jsonl"
    code, _, err = await run_cli("crawl", f"{spider}:Pages", "-o", str(target))
    assert code == 2
    assert f"netdisco: error: feed {str(target)!r} cannot be written" in err
    assert "Traceback" not in err
    assert blocker.read_text() == "a file, not a directory"


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"x.json": {}}, "a JSON array cannot be appended to"),
        ({"x.txt": {}}, "cannot tell the format of 'x.txt'"),
        ({"{spidr}.jsonl": {}}, "unknown placeholder {spidr}"),
        ({"x.csv": {"fields": "url"}}, "feeds.x.csv.fields: expected a list of names"),
        ({"x.csv": {"format": "xml"}}, "feeds.x.csv.format: expected one of"),
        ({"x.csv": {"overwite": True}}, "feeds.x.csv.overwite: unknown option"),
        ({"-": {"format": "sqlite"}}, "standard output cannot hold a SQLite table"),
        ("[1, 2]", "expected a table of URI -> options"),
    ],
)
def test_bad_feeds_are_refused_naming_the_key(value: Any, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("{", r"\{").replace(".", r"\.")):
        Settings().replace(feeds=value)


def test_feeds_from_json_text_and_cli_formats() -> None:
    [spec] = parse_feeds("feeds", '{"out/{spider}.csv": {"fields": ["url"], "overwrite": true}}')
    assert (spec.format, spec.fields, spec.overwrite) == ("csv", ("url",), True)
    assert cli_feed("items.txt:jsonl", overwrite=False).format == "jsonl"
    assert cli_feed("sqlite:///x/items.db", overwrite=True).format == "sqlite"
    assert cli_feed("-", overwrite=False).stdout


class Items(Spider):
    name = "items"


async def test_items_reach_the_os_at_once_and_sqlite_adds_columns(tmp_path: Path) -> None:
    """What is written is handed to the operating system at once (a killed process loses
    nothing); ``flush`` also syncs it to disk."""
    [lines, rows] = parse_feeds("feeds", {f"{tmp_path}/i.jsonl": {}, f"{tmp_path}/i.db": {}})
    feeds = [FeedPipeline(spec, spider="items", engine="e") for spec in (lines, rows)]
    for feed in feeds:
        await feed.open()
        feed.process({"url": "u1"})
        feed.process([{"url": "u2", "extra": 3}])  # a buffered batch, with a new key
    assert len((tmp_path / "i.jsonl").read_text().splitlines()) == 2  # not in a buffer
    with sqlite3.connect(tmp_path / "i.db") as db:  # committed: another reader sees the rows
        assert db.execute("SELECT url, extra FROM items").fetchall() == [("u1", None), ("u2", 3)]
    for feed in feeds:
        await feed.flush()
    for feed in feeds:
        await feed.close()
    with pytest.raises(FeedError, match="was not opened"):
        feeds[0].process({"url": "late"})


async def test_a_crawler_with_an_unwritable_feed_fails_at_start(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    settings = Settings(feeds=parse_feeds("feeds", {f"{tmp_path}/file/x.jsonl": {}}))
    crawler = Crawler(Items(), settings)
    with pytest.raises(FeedError, match=r"x\.jsonl' cannot be written"):
        await crawler.start()
    assert crawler.state.value == "failed"
