"""Issue 11: ``state_dir`` keeps a standalone crawl in SQLite, so the same command resumes it.

Real parts only: ``netdisco crawl`` as a child process, killed with SIGTERM or SIGKILL,
a 2,000-page site on loopback that counts every fetch, and the state database read
back after the kill to know exactly which requests were unacknowledged.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import resource
import signal
import sqlite3
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from aiohttp import web

from netdisco.crawl.request import Request
from netdisco.crawl.scheduler import fingerprint
from netdisco.testing import eventually
from tests.netdisco.conftest import PAGES
from tests.netdisco.redis_support import SiteServer, gen_spider_source

ENV = {k: v for k, v in os.environ.items() if not k.startswith("NETDISCO_")}


def crawl_argv(spider: str, state: Path, *extra: str) -> list[str]:
    return [
        *(sys.executable, "-m", "netdisco.cli", "--log-json", "crawl", spider),
        *("-s", f"state_dir={state}", "-s", "concurrency=8", "-s", "obey_robots=false"),
        *("-s", "progress_interval=0", "-s", "retries=0", *extra),
    ]


def start(argv: list[str], log: Path, **kwargs: object) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=ENV, **kwargs)  # type: ignore[call-overload, no-any-return]


async def finish(proc: subprocess.Popen[bytes], timeout: float = 300.0) -> int:
    """Wait for a child without blocking the loop that serves the site."""
    await eventually(lambda: proc.poll() is not None, "the crawl to end", timeout=timeout)
    return proc.returncode


def acknowledged(state: Path, base: str, paths: set[str]) -> set[str]:
    """The pages among ``paths`` whose acknowledgement the state committed: their add was
    committed (their fingerprint is seen) and their row deleted (no longer queued)."""
    with sqlite3.connect(state / "frontier.sqlite") as db:
        bodies = [row[0] for row in db.execute("SELECT body FROM queue")]
        seen = {row[0] for row in db.execute("SELECT fp FROM seen")}
    queued = {urlsplit(json.loads(body)["url"]).path for body in bodies}
    return {path for path in paths - queued if fingerprint(Request(f"{base}{path}")) in seen}


def item_paths(output: Path) -> list[str]:
    return [urlsplit(json.loads(line)["url"]).path for line in output.read_text().splitlines()]


def closed_totals(log: Path) -> dict[str, int]:
    """The counters of the last ``spider_closed`` line of a crawl's JSON log."""
    closed = [line for line in log.read_text().splitlines() if '"spider_closed"' in line]
    return dict(json.loads(closed[-1]))


@pytest.fixture
def spider_file(tmp_path: Path, counting_site: SiteServer) -> str:
    return write_spider(tmp_path, counting_site)


def write_spider(directory: Path, site: SiteServer) -> str:
    path = directory / "gen_spider.py"
    path.write_text(gen_spider_source(site.base))
    return f"{path}:Gen"


class GatedSite(SiteServer):
    """The counting site, whose pages answer only while ``open`` is set."""

    def __init__(self, root: Path, delay: float = 0.0) -> None:
        super().__init__(root, delay)
        self.open = asyncio.Event()
        self.open.set()

    async def _handle(self, request: web.BaseRequest) -> web.StreamResponse:
        await self.open.wait()
        return await super()._handle(request)


@pytest.fixture
async def gated_site(site_dir: Path) -> AsyncIterator[GatedSite]:
    server = GatedSite(site_dir, delay=0.002)
    await server.start()
    yield server
    server.open.set()  # nothing held outlives the test
    await server.stop()


def logged(log: Path, event: str) -> bool:
    """Whether a crawl's JSON log has a line of ``event`` (a line being written is not)."""
    for line in log.read_text().splitlines():
        with contextlib.suppress(ValueError):
            record = json.loads(line)
            if isinstance(record, dict) and record.get("event") == event:
                return True
    return False


@pytest.mark.slow
async def test_kill_9_halfway_then_the_same_command_refetches_only_unacknowledged(
    tmp_path: Path, counting_site: SiteServer, spider_file: str
) -> None:
    state, output, log = tmp_path / "state", tmp_path / "items.jl", tmp_path / "crawl.log"
    argv = crawl_argv(spider_file, state, "-o", str(output))
    first = start(argv, log)
    try:
        await eventually(lambda: counting_site.fetched >= PAGES // 2, "half the site")
    finally:
        first.kill()
        first.wait(10)
    fetched_before = set(counting_site.fetches)
    done = acknowledged(state, counting_site.base, set(counting_site.pages))
    assert len(fetched_before) < PAGES, "the crawl ended before the kill"
    assert len(done) >= PAGES // 4  # most pages fetched were acknowledged
    assert await finish(start(argv, log)) == 0, log.read_text()[-3000:]
    assert counting_site.fetched == PAGES
    assert max(counting_site.fetches.values()) <= 2
    twice = {path for path, n in counting_site.fetches.items() if n == 2}
    assert twice  # some were in flight at the kill (the site may count those a bit late)
    assert not twice & done  # an acknowledged page is never fetched again
    assert set(item_paths(output)) == set(counting_site.fetches)  # every page's item


@pytest.mark.slow
async def test_sigterm_then_rerun_fetches_nothing_twice_and_a_second_process_is_refused(
    tmp_path: Path, gated_site: GatedSite
) -> None:
    counting_site = gated_site
    state, output, log = tmp_path / "state", tmp_path / "items.jl", tmp_path / "crawl.log"
    # a generous timeout: the held pages must not time out while the site holds them
    argv = crawl_argv(write_spider(tmp_path, counting_site), state, "-o", str(output))
    argv += ["-s", "timeout=300"]
    first = start(argv, log)
    try:
        await eventually(lambda: counting_site.fetched >= PAGES // 4, "a quarter of the site")
        # the site holds every page from here until the first crawl is stopping: it is
        # still crawling while a second starts, however long that start takes
        counting_site.open.clear()
        second = start(argv, tmp_path / "second.log")
        assert await finish(second, 60) == 2
        refused = (tmp_path / "second.log").read_text()
        assert (
            f"state_dir '{state}': in use by another netdisco process (pid {first.pid})" in refused
        )
        first.send_signal(signal.SIGTERM)
        await eventually(lambda: logged(log, "stopping"), "the first crawl stopping", timeout=60)
        counting_site.open.set()  # the requests in flight end, and nothing new starts
        assert await finish(first, 60) == 128 + signal.SIGTERM  # stopped, not finished
    finally:
        counting_site.open.set()
        if first.poll() is None:
            first.kill()
    assert counting_site.fetched < PAGES, "the crawl ended before the stop"
    assert await finish(start(argv, log)) == 0, log.read_text()[-3000:]
    assert counting_site.fetched == PAGES
    assert counting_site.duplicates == 0
    assert sorted(item_paths(output)) == sorted(counting_site.fetches)  # appended, once each
    assert closed_totals(log)["succeeded"] == PAGES  # the counters carried on across runs
    again = await finish(start(argv, tmp_path / "again.log"))
    assert again == 0
    assert "crawl_already_finished" in (tmp_path / "again.log").read_text()
    assert counting_site.duplicates == 0


def run_crawl(argv: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, env=ENV, **kwargs)  # type: ignore[call-overload, no-any-return]


def make_foreign(path: Path) -> None:
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE users (name TEXT)")
        db.execute("INSERT INTO users VALUES ('ada')")


def make_older(path: Path) -> None:
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE netdisco_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        db.execute("CREATE TABLE seen (fp BLOB PRIMARY KEY) WITHOUT ROWID")
        db.execute("CREATE TABLE queue (id INTEGER PRIMARY KEY, priority INTEGER, body TEXT)")
        db.execute("INSERT INTO netdisco_meta VALUES ('schema_version', '0'), ('spider', 'shop')")


BAD_DATABASES: dict[str, tuple[Callable[[Path], object], str]] = {
    "corrupt": (lambda p: p.write_bytes(b"not a database " * 400), "is not a readable"),
    "foreign": (make_foreign, "not a netdisco crawl state (tables: users)"),
    "older schema": (make_older, "written with state schema version 0"),
}


@pytest.mark.parametrize("kind", sorted(BAD_DATABASES))
def test_a_state_that_is_not_ours_is_refused_and_left_as_it_is(tmp_path: Path, kind: str) -> None:
    make, message = BAD_DATABASES[kind]
    state = tmp_path / "state"
    state.mkdir()
    database = state / "frontier.sqlite"
    make(database)
    before = database.read_bytes()
    done = run_crawl(crawl_argv("netdisco.demo.site:Shop", state))
    assert done.returncode == 2, done.stderr
    assert f"netdisco: error: state_dir '{database}'" in done.stderr
    assert message in done.stderr
    assert database.read_bytes() == before


def test_a_state_dir_that_is_a_file_is_refused(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.write_text("my notes\n")
    done = run_crawl(crawl_argv("netdisco.demo.site:Shop", state))
    assert done.returncode == 2
    assert f"netdisco: error: state_dir '{state}': is not a directory" in done.stderr
    assert state.read_text() == "my notes\n"


def test_an_unwritable_state_dir_is_refused(tmp_path: Path) -> None:
    """Immutable (``chattr +i``): not even root may write in it."""
    state = tmp_path / "state"
    state.mkdir()
    if subprocess.run(["chattr", "+i", str(state)], capture_output=True).returncode:
        pytest.skip("chattr +i needs root on a file system that supports it")
    try:
        done = run_crawl(crawl_argv("netdisco.demo.site:Shop", state))
        assert done.returncode == 2, done.stderr
        assert f"state_dir '{state}': cannot be written: Operation not permitted" in done.stderr
        assert list(state.iterdir()) == []
    finally:
        subprocess.run(["chattr", "-i", str(state)], check=True)


def limit_file_size() -> None:
    """A full disk, for this process: no file may grow past 48 KiB (EFBIG)."""
    resource.setrlimit(resource.RLIMIT_FSIZE, (48 * 1024, 48 * 1024))


@pytest.mark.slow
async def test_a_full_disk_mid_crawl_fails_with_the_path_and_exit_2(
    tmp_path: Path, counting_site: SiteServer, spider_file: str
) -> None:
    state, log = tmp_path / "state", tmp_path / "crawl.log"
    proc = start(crawl_argv(spider_file, state), log, preexec_fn=limit_file_size)
    assert await finish(proc) == 2, log.read_text()[-3000:]
    assert counting_site.fetched < PAGES
    assert (
        f"netdisco: error: state_dir '{state / 'frontier.sqlite'}': cannot keep the crawl state"
        in (log.read_text())
    )


def test_state_dir_is_refused_with_a_redis_frontier() -> None:
    from netdisco.crawl import settings
    from netdisco.exceptions import ConfigError

    with pytest.raises(ConfigError, match="state_dir"):
        settings.from_mapping({"state_dir": "/tmp/x", "frontier": "redis://127.0.0.1:1/0"})
