"""``netdisco crawl``'s exit codes, closing summary, spider arguments and global flags,
each a subprocess against a loopback site."""

from __future__ import annotations

import asyncio
import json
import os
import pty
import re
import signal
from pathlib import Path
from typing import Any

import pytest

from netdisco.testing import free_port
from tests.netdisco.sites import ROOT, Site
from tests.netdisco.test_cli import CATALOGUE, NETDISCO, _env, run_cli, site

__all__ = ["site"]  # the fixture, imported for this module's tests


def _summary(err: str) -> dict[str, Any]:
    lines = [json.loads(line) for line in err.splitlines() if '"crawl_summary"' in line]
    assert len(lines) == 1, err
    found: dict[str, Any] = lines[0]
    return found


def _events(err: str, event: str) -> list[dict[str, Any]]:
    lines = [json.loads(line) for line in err.splitlines() if f'"{event}"' in line]
    return [line for line in lines if line["event"] == event]


DOWN = """
from netdisco import Spider

class Down(Spider):
    start_urls = [{url!r}]

    def parse(self, response):
        yield {{"url": response.url}}
"""


async def test_a_site_that_is_down_exits_1_and_says_why(tmp_path: Path) -> None:
    spider = tmp_path / "down.py"
    spider.write_text(DOWN.format(url=f"http://127.0.0.1:{free_port()}/"))  # nobody listens
    code, _, err = await run_cli("crawl", f"{spider}:Down", "-s", "retries=0", "--log-json")
    assert code == 1, err
    report = _summary(err)
    assert report["pages"]["ok"] == 0
    assert report["pages"]["failed"] == 1
    assert report["state"] == "finished"
    assert report["exit_code"] == 1
    assert report["errors"] == {"ClientConnectorError": 1}


async def test_fail_on_thresholds_exit_1_and_say_which(site: Site, tmp_path: Path) -> None:
    env = _env(LOCAL_SITE_URL=site.url("/shop/"))
    args = ("crawl", CATALOGUE, "-O", str(tmp_path / "i.jsonl"), "-s", "max_pages=4",
            "--log-json", "--fail-on", "error_ratio=0.5", "--fail-on", "min_pages=4")  # fmt: skip
    code, _, err = await run_cli(*args, env=env)
    assert (code, _summary(err)["failed_checks"]) == (0, []), err
    code, _, err = await run_cli(*args, "--fail-on", "min_items=1000", env=env)
    report = _summary(err)
    assert (code, report["exit_code"]) == (1, 1), err
    assert report["failed_checks"] == [f"min_items {report['items']} below 1000"]
    for bad in ("bogus=1", "error_ratio=2", "errors=-1", "errors=nan", "min_items"):
        code, _, err = await run_cli("crawl", CATALOGUE, "--fail-on", bad, env=env)
        assert code == 2, (bad, err)
        assert "--fail-on" in err, err


async def test_the_json_summary_names_each_feed_and_its_count(site: Site, tmp_path: Path) -> None:
    jsonl, csv = tmp_path / "items.jsonl", tmp_path / "items.csv"
    env = _env(LOCAL_SITE_URL=site.url("/shop/"))
    args = ("crawl", CATALOGUE, "-O", str(jsonl), "-O", str(csv), "-s", "max_pages=12")
    code, _, err = await run_cli("--log-json", *args, env=env)
    assert code == 0, err
    report = _summary(err)
    written = len(jsonl.read_text().splitlines())
    assert written > 0
    assert report["feeds"] == [
        {"format": "jsonl", "path": str(jsonl), "items": written},
        {"format": "csv", "path": str(csv), "items": written},
    ]
    assert (report["items"], report["pages"]["ok"], report["exit_code"]) == (written, 12, 0)
    closed = _events(err, "spider_closed")[0]
    assert (closed["bytes"], closed["queue_size"]) == (report["bytes"], report["queue_size"])
    assert not _events(err, "items_discarded")


async def test_on_a_terminal_the_summary_is_a_few_readable_lines(
    site: Site, tmp_path: Path
) -> None:
    out = tmp_path / "items.jsonl"
    env = _env(LOCAL_SITE_URL=site.url("/shop/"), TERM="xterm")
    primary, secondary = pty.openpty()  # stderr is a terminal: readable lines, no JSON
    try:
        process = await asyncio.create_subprocess_exec(
            NETDISCO, "crawl", CATALOGUE, "-O", str(out), "--log-level", "warning",
            cwd=ROOT, env=env, stdout=asyncio.subprocess.DEVNULL, stderr=secondary,
        )  # fmt: skip
        os.close(secondary)
        code = await asyncio.wait_for(process.wait(), 40)
        text = await asyncio.to_thread(_read_all, primary)
    finally:
        os.close(primary)
    assert code == 0, text
    live, shown, summary = text.rpartition(CURSOR_SHOWN)  # the live table ends, then the summary
    assert shown, text  # a terminal gets the live display ...
    assert "pages/s" in live, text
    assert "catalogue  finished" in live, text  # ... drawn once more at the end, then erased
    written = len(out.read_text().splitlines())
    assert f"Stored jsonl feed ({written} items) in {out}" in summary
    assert "pages    31 ok, 0 failed  (" in summary  # duplicates are not on the pages line
    assert "filtered" not in summary  # which reads like a problem: they are skipped, as meant
    assert re.search(r"\n  skipped  \d+ links already seen or out of scope \(as meant", summary)
    assert "{" not in summary  # not a JSON line
    summary = summary.lstrip("\r").removeprefix(ERASE_LINE * 3)
    assert "\x1b" not in summary, text  # plain lines: no colour, no cursor moves
    lines = [line for line in summary.splitlines() if str(out) not in line]
    assert lines, text
    assert max(len(line) for line in lines) < 80, text


CURSOR_SHOWN = "\x1b[?25h"  # rich's live display hides the cursor while it draws
ERASE_LINE = "\x1b[1A\x1b[2K"  # and erases its lines when it stops


def _read_all(fd: int) -> str:
    chunks = []
    while True:
        try:
            chunk = os.read(fd, 65536)
        except OSError:  # EIO: the child closed its end
            break
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks).decode()


SLOW = """
from netdisco import Spider

class Slow(Spider):
    name = "slow"
    start_urls = [{base!r} + f"/slow/{{n}}?s=0.2" for n in range(200)]

    def parse(self, response):
        yield {{"url": response.url}}
"""


async def test_ctrl_c_exits_130_and_the_counters_agree(site: Site, tmp_path: Path) -> None:
    spider, out = tmp_path / "slow.py", tmp_path / "out.jsonl"
    spider.write_text(SLOW.format(base=site.base))
    process = await asyncio.create_subprocess_exec(
        NETDISCO, "crawl", f"{spider}:Slow", "-o", str(out), "-s", "concurrency=4",
        "-s", f"state_dir={tmp_path / 'state'}", "--log-json",
        cwd=ROOT, env=_env(), stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    loop = asyncio.get_running_loop()
    end = loop.time() + 20
    while len(site.paths("/slow/")) < 8:
        assert loop.time() < end, "the crawl did not start"
        await asyncio.sleep(0.02)
    process.send_signal(signal.SIGINT)
    _, raw = await asyncio.wait_for(process.communicate(), 30)
    err = raw.decode()
    assert process.returncode == 130, err
    closed, stored = _events(err, "spider_closed")[0], _events(err, "state_closed")[0]
    report = _summary(err)
    assert closed["state"] == report["state"] == "stopped"
    assert closed["queue_size"] == stored["queued"] == report["queue_size"] > 0
    assert report["pages"]["ok"] == len(out.read_text().splitlines()) < 200


ARGUMENTS = """
from netdisco import Request, Spider

class Tagged(Spider):
    name = "tagged"
    colour = "none"

    def __init__(self, page: str = "0", **kwargs):
        super().__init__(**kwargs)
        self.page = int(page)

    async def start(self):
        yield Request({base!r} + f"/shop/p/{{self.page}}", callback=self.parse)

    def parse(self, response):
        yield {{"url": response.url, "colour": self.colour, "page": self.page}}

    def label(self):
        return f"{{self.colour}} {{self.page}}"


class Strict(Spider):
    def __init__(self, page: str) -> None:
        super().__init__()
        self.page = page

    async def start(self):
        yield Request({base!r} + f"/shop/p/{{self.page}}", callback=self.parse)

    def parse(self, response):
        yield {{"page": self.page, "colour": getattr(self, "colour", None)}}
"""


async def test_spider_arguments_become_keywords_or_attributes(site: Site, tmp_path: Path) -> None:
    spider = tmp_path / "tagged.py"
    spider.write_text(ARGUMENTS.format(base=site.base))
    code, out, err = await run_cli(
        "crawl", f"{spider}:Tagged", "-a", "page=3", "-a", "colour=red", "-o", "-",
        "-s", "depth_limit=1",
    )  # fmt: skip
    assert code == 0, err
    assert json.loads(out.splitlines()[0]) == {
        "url": site.url("/shop/p/3"), "colour": "red", "page": 3,
    }  # fmt: skip
    # an __init__ without **kwargs: what it names is a keyword, the rest an attribute
    args = ("crawl", f"{spider}:Strict", "-a", "page=4", "-a", "colour=blue", "-o", "-")
    code, out, err = await run_cli(*args, "-s", "max_pages=1")
    assert code == 0, err
    assert json.loads(out.splitlines()[0]) == {"page": "4", "colour": "blue"}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["-a", "parse=x"], "-a parse: would replace Spider.parse"),
        (["-a", "label=x"], "-a label: would replace the spider's method label"),
        (["-a", "name=x"], "-a name: would replace Spider.name"),
        (["-a", "9lives=x"], "-a 9lives: an argument name must be a Python identifier"),
        (["-a", "colour"], "colour: expected name=value"),
        (
            ["-s", "DOWNLOAD_DELAI=1"],
            "DOWNLOAD_DELAI: unknown setting; did you mean download_delay?",
        ),
        (
            ["-s", "RANDOMIZE_DOWNLOAD_DELAY=true"],
            "RANDOMIZE_DOWNLOAD_DELAY: netdisco's download_delay is fixed",
        ),
    ],
)
async def test_bad_arguments_exit_2_naming_them(
    tmp_path: Path, args: list[str], message: str
) -> None:
    spider = tmp_path / "tagged.py"
    spider.write_text(ARGUMENTS.format(base="http://127.0.0.1:9"))
    code, _, err = await run_cli("crawl", f"{spider}:Tagged", *args)
    assert code == 2, err
    assert f"netdisco: error: {message}" in err
    assert "Traceback" not in err


async def test_bad_usage_exits_2() -> None:
    code, _, err = await run_cli("crawl")
    assert code == 2
    assert "the following arguments are required: spider" in err


async def test_global_flags_after_the_subcommand_and_scrapy_names(
    site: Site, tmp_path: Path
) -> None:
    out = tmp_path / "items.jsonl"
    env = _env(LOCAL_SITE_URL=site.url("/shop/"))
    code, _, err = await run_cli(
        "crawl", CATALOGUE, "-O", str(out), "-s", "CLOSESPIDER_PAGECOUNT=5",
        "-s", "CONCURRENT_REQUESTS=2", "--log-json", "--log-level", "warning", env=env,
    )  # fmt: skip
    assert code == 0, err
    lines = [json.loads(line) for line in err.splitlines()]
    assert {line.get("level") for line in lines[:-1]} <= {"warning", "error"}  # no info
    assert _summary(err)["pages"]["ok"] == 5
    assert site.peak["127.0.0.1"] <= 2
    code, _, err = await run_cli("crawl", CATALOGUE, "-O", str(out), "-s", "max_pages=1",
                                 "-s", "DOWNLOAD_DELAY=0", "--log-json", env=env)  # fmt: skip
    assert code == 0, err
    assert _events(err, "setting_alias")[0] == {
        **_events(err, "setting_alias")[0],
        "key": "DOWNLOAD_DELAY", "use": "download_delay",
    }  # fmt: skip


async def test_items_with_nowhere_to_go_are_counted_and_warned_of_once(site: Site) -> None:
    env = _env(LOCAL_SITE_URL=site.url("/shop/"))
    code, _, err = await run_cli("--log-json", "crawl", CATALOGUE, "-s", "max_pages=8", env=env)
    assert code == 0, err
    warned = _events(err, "items_discarded")
    assert [line["level"] for line in warned] == ["warning"]
    report = _summary(err)
    assert report["items_discarded"] == report["items"] > 1
