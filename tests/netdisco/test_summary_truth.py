"""The closing summary tells the truth: a WARC feed counts records, a crawl that had
finished before (``state_dir``, a shared Redis crawl) says so, claims no pages and says
how to crawl again, and an error is shown whole, once."""

from __future__ import annotations

import asyncio
import gzip
import io
import uuid
from pathlib import Path

from rich.console import Console

from netdisco.crawl.stats import Stats
from netdisco.crawl.summary import render
from netdisco.progress import Row, frame
from netdisco.testing import RedisServer, free_port
from tests.netdisco.sites import Site
from tests.netdisco.test_cli import CATALOGUE, _env, run_cli, site
from tests.netdisco.test_cli_summary import DOWN, _events, _summary

__all__ = ["site"]  # the fixture, imported for this module's tests


def _warc_records(path: Path) -> list[str]:
    """The WARC-Type of every record, read without a WARC library."""
    text = gzip.decompress(path.read_bytes()).decode("latin-1")
    return [line.split(":", 1)[1].strip() for line in text.split("\r\n")
            if line.startswith("WARC-Type:")]  # fmt: skip


async def test_a_warc_feed_counts_its_records(site: Site, tmp_path: Path) -> None:
    archive = tmp_path / "pages.warc.gz"
    env = _env(LOCAL_SITE_URL=site.url("/shop/"))
    args = ("crawl", CATALOGUE, "-O", str(archive), "-s", "max_pages=6", "--log-json")
    code, _, err = await run_cli(*args, env=env)
    assert code == 0, err
    report = _summary(err)
    kinds = _warc_records(archive)
    responses = sum(kind in ("response", "revisit") for kind in kinds)
    assert responses >= 6
    (feed,) = report["feeds"]
    assert feed == {"format": "warc", "path": str(archive), "records": len(kinds),
                    "responses": responses}  # fmt: skip
    assert f"Stored warc feed ({len(kinds)} records, {responses} responses) in" in render(report)


async def _crawl_twice(*args: str, env: dict[str, str]) -> tuple[dict[str, object], str]:
    code, _, err = await run_cli("crawl", CATALOGUE, *args, "--log-json", env=env)
    assert code == 0, err
    first = _summary(err)
    assert first["pages"]["ok"] > 0
    code, _, err = await run_cli("crawl", CATALOGUE, *args, "--log-json", env=env)
    assert code == 0, err
    return _summary(err), err


def _claims_nothing(report: dict[str, object]) -> str:
    assert report["state"] == "finished"
    pages = report["pages"]
    assert isinstance(pages, dict)
    assert [pages[key] for key in ("ok", "failed", "retried", "not_modified")] == [0] * 4
    assert (report["items"], report["pages_per_second"]) == (0, 0.0)
    text = render(report)
    assert text.startswith("Spider catalogue had already finished: nothing fetched in ")
    assert "pages/s" not in text
    again = str(report["already_finished"])
    assert f"  again    {again}" in text
    return again


async def test_a_finished_state_dir_crawl_run_again_says_so_and_claims_no_pages(
    site: Site, tmp_path: Path
) -> None:
    state = tmp_path / "state"
    env = _env(LOCAL_SITE_URL=site.url("/shop/"))
    report, err = await _crawl_twice("-s", f"state_dir={state}", env=env)
    again = _claims_nothing(report)
    assert again.endswith(f"delete the state_dir (rm -r {state}) or use another")
    assert "set recrawl or age for a new run" in again
    (warning,) = _events(err, "crawl_already_finished")
    assert warning["to_crawl_again"] == again


async def test_a_finished_shared_crawl_run_again_says_how_to_start_over(
    site: Site, redis_server: RedisServer
) -> None:
    url, prefix = redis_server.url, f"p{uuid.uuid4().hex[:8]}"
    frontier = f"{url}?prefix={prefix}"
    env = _env(LOCAL_SITE_URL=site.url("/shop/"))
    report, err = await _crawl_twice("-s", f"frontier={frontier}", env=env)
    again = _claims_nothing(report)
    command = (f"redis-cli -u {url} --scan --pattern '{prefix}:{{catalogue[}}#]*' "
               f"| xargs -r redis-cli -u {url} del")  # fmt: skip
    assert again.endswith(f"delete its keys: {command}"), again
    assert f"this one is '{prefix}'" in again
    (warning,) = _events(err, "crawl_already_finished")
    assert warning["to_crawl_again"] == again
    shell = await asyncio.create_subprocess_shell(command, stdout=asyncio.subprocess.DEVNULL)
    assert await asyncio.wait_for(shell.wait(), 20) == 0
    code, _, err = await run_cli("crawl", CATALOGUE, "-s", f"frontier={frontier}",
                                 "--log-json", env=env)  # fmt: skip
    assert code == 0, err
    assert _summary(err)["pages"]["ok"] > 0  # started over, as the message said
    assert not _events(err, "crawl_already_finished")


async def test_an_error_is_logged_whole_once(tmp_path: Path) -> None:
    spider = tmp_path / "down.py"
    url = f"http://127.0.0.1:{free_port()}/"
    spider.write_text(DOWN.format(url=url))
    args = ("-s", "retries=0", "-s", "obey_robots=false", "--log-json")
    code, _, err = await run_cli("crawl", f"{spider}:Down", *args)
    assert code == 1, err
    error = str(_summary(err)["last_error"])
    assert error.startswith(url)
    assert error.endswith(")]")  # whole: "... [Connect call failed ('127.0.0.1', N)]"
    logged = [line for line in err.splitlines() if '"crawl_summary"' not in line]
    said = error.removeprefix(f"{url}: ")
    assert sum(line.count(said) for line in logged) == 1, err


def test_the_display_shows_an_error_whole_and_once() -> None:
    long = "http://127.0.0.1:9/: ClientConnectorError: " + "x" * 300 + " [Connect call failed]"
    rows = []
    for name in ("alpha", "beta"):
        stats = Stats()
        stats.error(long)
        rows.append(Row(name, "running", stats))
    out = io.StringIO()
    Console(file=out, width=80, color_system=None).print(frame("engine e", rows))
    text = "".join(out.getvalue().split())
    assert text.count("".join(long.split())) == 1, out.getvalue()
    assert "lasterror(alpha,beta):" in text
