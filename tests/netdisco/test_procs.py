"""``netdisco crawl -j N``: one crawl on N worker processes (issue 28, item 1).

Everything real: the CLI in a subprocess, its private redis-server, its workers and a
loopback site that counts every fetch (pages and robots.txt).
"""

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
from aiohttp import web

from netdisco.testing import write_site
from tests.hangs import witness
from tests.netdisco.redis_support import SiteServer, gen_spider_source
from tests.reaper import alive as running

NETDISCO = str(Path(sys.executable).with_name("netdisco"))
PAGES = 240


class CountingSite(SiteServer):
    """The generated site, counting robots.txt fetches too."""

    def __init__(self, root: Path, delay: float) -> None:
        super().__init__(root, delay)
        self.robots = 0

    async def _handle(self, request: web.BaseRequest) -> web.StreamResponse:
        if request.path == "/robots.txt":
            self.robots += 1
        return await super()._handle(request)


@pytest.fixture(scope="module")
def small_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_site(tmp_path_factory.mktemp("site"), PAGES)


@pytest.fixture
async def site(small_site: Path) -> AsyncIterator[CountingSite]:
    server = CountingSite(small_site, delay=0.01)
    await server.start()
    yield server
    await server.stop()


def spider_file(tmp: Path, site: CountingSite) -> str:
    path = tmp / "gen_spider.py"
    path.write_text(gen_spider_source(site.base))
    return f"{path}:Gen"


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NETDISCO_")}
    return {**env, **extra}


async def start(*args: str, env: dict[str, str] | None = None) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        NETDISCO, "--log-json", "crawl", *args, env=env or _env(),
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip


async def finish(process: asyncio.subprocess.Process) -> tuple[int, list[dict[str, Any]]]:
    """Its exit status and its JSON log lines (the summary among them)."""
    try:
        _, err = await asyncio.wait_for(process.communicate(), 50)
    except TimeoutError:  # what the crawl and its workers wait on, in the failure's output
        await asyncio.to_thread(witness, sys.stderr.fileno(), "a crawl that did not end")
        raise
    lines = [json.loads(line) for line in err.decode().splitlines() if line.startswith("{")]
    assert process.returncode is not None
    return process.returncode, lines


def events(lines: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [line for line in lines if line.get("event") == name]


def urls(path: Path) -> list[str]:
    return [json.loads(line)["url"] for line in path.read_text().splitlines()]


def workers(parent: int) -> list[int]:
    """The pids of the worker processes of the crawl ``parent`` (its own children)."""
    children = Path(f"/proc/{parent}/task/{parent}/children").read_text().split()
    found = []
    for pid in children:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            if b"netdisco.procs.worker" in handle.read():
                found.append(int(pid))
    return found


def children(parent: int) -> list[int]:
    """The pids of ``parent``'s children, whichever of its threads started them."""
    found = []
    for task in Path(f"/proc/{parent}/task").iterdir():
        try:
            found += [int(pid) for pid in (task / "children").read_text().split()]
        except OSError:  # a thread that ended meanwhile
            continue
    return found


async def until(check: Any, timeout: float = 20.0) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not check():
        assert loop.time() < end, "timed out"
        await asyncio.sleep(0.02)


async def test_j2_writes_the_items_of_j1_each_page_fetched_once(
    site: CountingSite, tmp_path: Path
) -> None:
    spider = spider_file(tmp_path, site)
    one, two = tmp_path / "one.jsonl", tmp_path / "two.jsonl"
    code, _ = await finish(await start(spider, "-j", "1", "-O", str(one), "-s", "concurrency=4"))
    assert code == 0
    site.fetches.clear()
    site.robots = 0
    code, lines = await finish(
        await start(spider, "-j", "2", "-O", str(two), "-s", "concurrency=4")
    )
    assert code == 0
    items = urls(two)
    assert len(items) == len(set(items)) == PAGES  # each item exactly once, no half line
    assert set(items) == set(urls(one))
    assert site.fetched == PAGES
    assert site.duplicates == 0
    assert site.robots == 1  # one robots.txt: the host has one owner, one of the workers
    closed = [line for line in events(lines, "spider_closed") if "owner" not in line]
    workers = [line for line in closed if "processes" not in line]
    assert len(workers) == 2
    assert sum(line["succeeded"] for line in workers) == PAGES
    (summary,) = events(lines, "crawl_summary")
    assert summary["pages"]["ok"] == PAGES
    assert summary["items"] == PAGES
    assert summary["feeds"] == [{"format": "jsonl", "path": str(two), "items": PAGES}]


async def test_a_killed_worker_loses_no_item_and_repeats_none(
    site: CountingSite, tmp_path: Path
) -> None:
    out = tmp_path / "out.jsonl"
    spider = spider_file(tmp_path, site)
    process = await start(spider, "-j", "2", "-O", str(out), "-s", "concurrency=4")
    await until(lambda: site.fetched >= PAGES // 4 and len(workers(process.pid)) == 2)
    os.kill(workers(process.pid)[0], signal.SIGKILL)
    code, lines = await finish(process)
    assert code == 0
    items = urls(out)
    assert len(items) == len(set(items)) == PAGES  # its unacknowledged pages: not twice
    assert site.fetched == PAGES  # nothing lost
    assert events(lines, "worker_died")
    # fetched again: at most what it held (in flight, prefetched, done but not acknowledged)
    assert site.duplicates <= sum(line["count"] for line in events(lines, "leases_recovered"))
    (summary,) = events(lines, "crawl_summary")
    assert summary["state"] == "finished"
    assert summary["feeds"][0]["items"] == PAGES


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
async def test_a_signal_stops_every_worker_with_one_summary(
    site: CountingSite, tmp_path: Path, signum: int
) -> None:
    site.delay = 0.2
    out = tmp_path / "out.jsonl"
    process = await start(spider_file(tmp_path, site), "-j", "2", "-O", str(out))
    await until(lambda: site.fetched >= 4 and len(workers(process.pid)) == 2)
    pids = workers(process.pid)
    process.send_signal(signum)
    code, lines = await finish(process)
    assert code == 128 + signum
    (summary,) = events(lines, "crawl_summary")
    assert summary["state"] == "stopped"
    # stopped, whatever it fetched by then (a loaded machine may have fetched every page
    # before the signal was handled: the state and the exit code say it stopped)
    assert len(urls(out)) == summary["feeds"][0]["items"] == summary["items"] <= PAGES
    assert not [pid for pid in pids if os.path.exists(f"/proc/{pid}")]  # noqa: ASYNC240


async def test_kill_9_of_the_crawl_resumes_with_state_dir(
    site: CountingSite, tmp_path: Path
) -> None:
    out, state = tmp_path / "out.jsonl", tmp_path / "state"
    args = (spider_file(tmp_path, site), "-j", "2", "-o", str(out), "-s", f"state_dir={state}")
    process = await start(*args)
    await until(lambda: site.fetched >= PAGES // 3)
    started = children(process.pid)  # its workers and its redis-server
    assert len(started) >= 3, started
    process.kill()
    await process.wait()
    # the workers and the server end with it (PR_SET_PDEATHSIG): wait until they have
    await until(lambda: not [pid for pid in started if running(pid)])
    code, lines = await finish(await start(*args))
    assert code == 0
    assert events(lines, "leases_recovered")
    assert set(urls(out)) == {site.base + path for path in site.pages}
    assert site.fetched == PAGES
    fetched = sum(site.fetches.values())
    (summary,) = events(lines, "crawl_summary")
    # the counters carry on (less what was counted in the killed run's last 0.5 s)
    assert PAGES // 2 < summary["pages"]["ok"] <= fetched
    code, lines = await finish(await start(*args))  # finished: nothing is fetched again
    assert code == 0
    assert sum(site.fetches.values()) == fetched
    (summary,) = events(lines, "crawl_summary")
    assert summary["state"] == "finished"
    assert summary["pages"]["ok"] == 0  # this run claims no page: it says why instead
    assert f"rm -r {state}" in summary["already_finished"]


async def test_without_redis_server_the_error_names_the_package(tmp_path: Path) -> None:
    spider = tmp_path / "s.py"
    spider.write_text(gen_spider_source("http://127.0.0.1:9"))
    process = await asyncio.create_subprocess_exec(
        NETDISCO, "crawl", f"{spider}:Gen", "-j", "2", env=_env(PATH="/nonexistent"),
        stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    _, err = await asyncio.wait_for(process.communicate(), 30)
    assert process.returncode == 2
    assert "install Debian's redis-server package" in err.decode()
