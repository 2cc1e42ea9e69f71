"""``netdisco crawl`` in a subprocess against the loopback site: items, exit codes, logs."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.netdisco.sites import ROOT, Site, load_example, running_site

NETDISCO = str(Path(sys.executable).with_name("netdisco"))
CATALOGUE = "examples/local_site.py:Catalogue"


@pytest.fixture
async def site() -> AsyncIterator[Site]:
    async with running_site() as served:
        yield served


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NETDISCO_")}
    return {**env, **extra}


async def run_cli(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    """Run ``netdisco ARGS`` from the repository root; exit code, stdout, stderr."""
    process = await asyncio.create_subprocess_exec(
        NETDISCO, *args, cwd=ROOT, env=env or _env(),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(process.communicate(), 40)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


async def test_crawl_writes_the_items_and_exits_0(site: Site, tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    env = _env(LOCAL_SITE_URL=site.url("/shop/"))
    code, _, err = await run_cli("crawl", CATALOGUE, "-o", str(out), "-s", "concurrency=4", env=env)
    assert code == 0, err
    shop = load_example("local_site")
    expected = [
        {"title": title, "price": price, "sku": sku, "url": site.url(f"/shop/p/{n}")}
        for n in range(shop.PAGES)
        for title, price, sku in [shop.product(n)]
    ]
    assert sorted(_lines(out), key=lambda item: item["sku"]) == expected
    assert site.peak["127.0.0.1"] <= 4


@pytest.mark.parametrize(
    ("pair", "message"),
    [
        ("concurrency=abc", "concurrency: expected int, got 'abc'"),
        ("concurency=4", "concurency: unknown setting"),
        ("obey_robots=maybe", "obey_robots: expected true or false"),
        ("download_delay=-1", "download_delay: must not be negative"),
        ("concurrency", "concurrency: expected name=value"),
    ],
)
async def test_bad_setting_exits_2_naming_the_key(pair: str, message: str) -> None:
    code, _, err = await run_cli("crawl", CATALOGUE, "-s", pair)
    assert code == 2
    assert f"netdisco: error: {message}" in err
    assert "Traceback" not in err


async def test_config_env_and_s_precedence(site: Site, tmp_path: Path) -> None:
    config = tmp_path / "crawl.toml"
    config.write_text('max_pages = 5\nconcurrency = 1\nuser_agents = "cli-test/1"\n')
    out = tmp_path / "out.jsonl"
    env = _env(LOCAL_SITE_URL=site.url("/shop/p/0"), NETDISCO_MAX_PAGES="4")
    args = ("crawl", CATALOGUE, "-O", str(out), "--config", str(config))
    code, _, err = await run_cli(*args, "-s", "max_pages=3", env=env)
    assert code == 0, err
    assert len(_lines(out)) == 3  # -s beats the environment
    code, _, err = await run_cli(*args, env=env)
    assert code == 0, err
    assert len(_lines(out)) == 4  # the environment beats the file


async def test_bad_config_file_and_bad_spider(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("concurrency = = 3\n")
    code, _, err = await run_cli("crawl", CATALOGUE, "--config", str(bad))
    assert code == 2
    assert "--config: " in err
    assert "is not valid TOML" in err
    code, _, err = await run_cli("crawl", "examples/missing.py:Nope")
    assert code == 2
    assert "no such file: examples/missing.py" in err


SPIDER = """
from netdisco import Spider

class Failing(Spider):
    name = "failing"
    start_urls = [{start!r}]

    def parse(self, response):
        yield {{"url": response.url}}
        yield from response.follow_all(css="a")
        if response.url.endswith("/tree/14"):
            raise ValueError("broken page")
"""


async def test_log_json_lines_carry_the_spider_and_url(site: Site, tmp_path: Path) -> None:
    spider = tmp_path / "failing.py"
    start = site.url("/page?link=/tree/14&link=/status/404")
    spider.write_text(SPIDER.format(start=start))
    code, out, err = await run_cli("--log-json", "crawl", f"{spider}:Failing", "-o", "-")
    assert code == 0, err
    assert sorted(json.loads(line)["url"] for line in out.splitlines()) == [
        start,
        site.url("/tree/14"),
    ]
    lines = [json.loads(line) for line in err.splitlines()]
    assert all(line["spider"] == "failing" for line in lines), lines
    by_event = {line["event"]: line for line in lines}
    assert by_event["request_failed"]["url"] == site.url("/status/404")
    assert by_event["callback_error"]["url"] == site.url("/tree/14")
    assert "broken page" in by_event["callback_error"]["error"]
    closed = by_event["spider_closed"]
    assert (closed["state"], closed["succeeded"], closed["failed"], closed["callback_errors"]) == (
        "finished", 2, 1, 1,
    )  # fmt: skip


SLOW_SPIDER = """
from netdisco import Spider

class Slow(Spider):
    name = "slow"
    start_urls = [{base!r} + f"/slow/{{n}}?s=0.2" for n in range(200)]

    def parse(self, response):
        yield {{"url": response.url}}
"""


async def test_sigterm_stops_gracefully(site: Site, tmp_path: Path) -> None:
    spider, out = tmp_path / "slow.py", tmp_path / "out.jsonl"
    spider.write_text(SLOW_SPIDER.format(base=site.base))
    process = await asyncio.create_subprocess_exec(
        NETDISCO, "--log-json", "crawl", f"{spider}:Slow", "-o", str(out), "-s", "concurrency=2",
        cwd=ROOT, env=_env(), stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    loop = asyncio.get_running_loop()
    end = loop.time() + 20
    while len(site.paths("/slow/")) < 4:
        assert loop.time() < end, "the crawl did not start"
        await asyncio.sleep(0.02)
    process.send_signal(signal.SIGTERM)
    _, err = await asyncio.wait_for(process.communicate(), 30)
    assert process.returncode == 128 + signal.SIGTERM  # stopped on request: not "done"
    closed = [json.loads(line) for line in err.decode().splitlines() if '"spider_closed"' in line]
    assert closed[0]["state"] == "stopped"
    assert len(_lines(out)) == closed[0]["succeeded"] < 200


BROKEN_PIPELINE = """
from netdisco import Pipeline
from tests.netdisco.sites import PageSpider

class Broken(Pipeline):
    async def open(self):
        raise FileExistsError("the sink is gone")

class BrokenSpider(PageSpider):
    def pipelines(self):
        return [Broken()]
"""


async def test_module_reference_and_a_failed_spider_exits_1(site: Site, tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    out = tmp_path / "file" / "items.jsonl"  # a feed under a file: refused at start, exit 2
    env = _env(LOCAL_SITE_URL=site.url("/shop/"), PYTHONPATH=str(ROOT))
    code, _, err = await run_cli(
        "--log-json", "crawl", "tests.netdisco.sites:PageSpider", "-o", str(out), env=env
    )
    assert code == 2
    assert f"feed {str(out)!r} cannot be written: {out.parent} is not a directory" in err
    (tmp_path / "broken.py").write_text(BROKEN_PIPELINE)
    code, _, err = await run_cli(
        "--log-json", "crawl", f"{tmp_path}/broken.py:BrokenSpider", env=env
    )
    assert code == 1
    failed = [json.loads(line) for line in err.splitlines() if '"spider_failed"' in line]
    assert failed[0]["spider"] == "pages"
    assert "FileExistsError" in failed[0]["error"]
