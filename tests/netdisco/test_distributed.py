"""Several engines share one crawl of a 2,000-page site through Redis, with faults.

Real Redis, real ZooKeeper (``zk_hosts``), a real aiohttp site on loopback that
counts every page fetched. Engines run in this process first, then as
processes (``tests.netdisco.redis_support``) that are SIGKILLed, stopped
gracefully, or left waiting while Redis restarts.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
import threading
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient
from redis import asyncio as aioredis

from netdisco import Crawler, SpiderState
from netdisco.crawl.codec import RequestCodec
from netdisco.frontiers.redis import RedisFrontier, RedisOptions
from netdisco.frontiers.redis.leases import Keys
from netdisco.testing import RedisServer, eventually
from tests import hangs
from tests.netdisco.conftest import PAGES
from tests.netdisco.redis_support import SiteServer, crawl_settings, site_spider

REPO = Path(__file__).resolve().parents[2]


class EngineProcess:
    """One engine process; its JSON lines on stdout, its logs in a file."""

    def __init__(self, proc: asyncio.subprocess.Process, log: Path) -> None:
        self.proc = proc
        self.log = log
        self.incarnation = ""

    @classmethod
    async def start(cls, tmp: Path, name: str, *args: str) -> EngineProcess:
        log = tmp / f"{name}.log"
        with log.open("wb") as err:
            proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "tests.netdisco.redis_support",
                *args,
                name,
                cwd=REPO,
                stdout=asyncio.subprocess.PIPE,
                stderr=err,
            )
        engine = cls(proc, log)
        ready = await engine.line(30.0)
        engine.incarnation = ready["incarnation"]
        return engine

    async def line(self, timeout: float) -> dict[str, Any]:
        assert self.proc.stdout is not None
        raw = await asyncio.wait_for(self.proc.stdout.readline(), timeout)
        assert raw, f"engine exited early; see {self.log}:\n{self.log.read_text()[-3000:]}"
        result: dict[str, Any] = json.loads(raw)
        return result

    async def finish(self, timeout: float = 50.0) -> dict[str, Any]:
        try:
            result = await self.line(timeout)
        except TimeoutError:  # a shared crawl that does not end: where its engine waits
            await asyncio.to_thread(hangs.witness, 2, f"engine {self.log.stem}")
            raise
        assert await self.proc.wait() == 0
        return result

    def kill(self) -> None:
        if self.proc.returncode is None:
            self.proc.kill()


@pytest.fixture
async def engines(tmp_path: Path) -> AsyncIterator[Callable[..., Any]]:
    started: list[EngineProcess] = []

    async def start(name: str, *args: str) -> EngineProcess:
        started.append(await EngineProcess.start(tmp_path, name, *args))
        return started[-1]

    yield start
    for engine in started:
        engine.kill()
        await engine.proc.wait()


def assert_every_page_fetched(counting_site: SiteServer) -> None:
    missing = set(counting_site.pages) - set(counting_site.fetches)
    assert not missing, f"{len(missing)} pages never fetched, e.g. {sorted(missing)[:3]}"


async def test_two_crawlers_in_one_process_fetch_each_page_once(
    counting_site: SiteServer, redis_url: str
) -> None:
    crawlers = []
    for owner in ("one", "two"):
        spider = site_spider(counting_site.base)
        frontier = RedisFrontier(
            RedisOptions.from_url(redis_url), spider.name, RequestCodec(spider), owner=owner
        )
        crawlers.append(Crawler(spider, crawl_settings(redis_url), frontier=frontier))
    try:
        stats = await asyncio.gather(*(c.run() for c in crawlers))
    finally:
        for crawler in crawlers:
            assert isinstance(crawler.frontier, RedisFrontier)
            await crawler.frontier.close()
    assert_every_page_fetched(counting_site)
    assert counting_site.duplicates == 0
    assert [c.state for c in crawlers] == [SpiderState.FINISHED] * 2
    assert sum(s.succeeded for s in stats) == PAGES
    # both took part (how the work was shared between them is timing, not a promise)
    assert all(s.succeeded > 0 for s in stats), [s.succeeded for s in stats]


def watch_deletion(zk_hosts: str, path: str) -> tuple[KazooClient, threading.Event]:
    """Set when ``path`` is deleted, as ZooKeeper tells a watcher (the loss detection)."""
    client = KazooClient(hosts=zk_hosts)
    client.start(timeout=15)
    gone = threading.Event()

    def on_event(event: Any) -> None:  # kazoo's thread: record, touch nothing
        if event.type == "DELETED":
            gone.set()

    assert client.exists(path, watch=on_event) is not None
    return client, gone


async def requeued(redis: aioredis.Redis, key: str, timeout: float = 20.0) -> None:
    """Until the lost engine's leases are back (its set of them gone)."""
    await eventually(
        lambda: _absent(redis, key), "the lost engine's leases returned", timeout=timeout
    )


async def _absent(redis: aioredis.Redis, key: str) -> bool:
    return not await redis.exists(key)


async def test_sigkilled_engine_loses_no_page(
    counting_site: SiteServer, redis_url: str, zk_hosts: str, engines: Callable[..., Any]
) -> None:
    victim = await engines("victim", redis_url, zk_hosts, counting_site.base)
    survivor = await engines("survivor", redis_url, zk_hosts, counting_site.base)
    client, gone = await asyncio.to_thread(watch_deletion, zk_hosts, "/netdiscovery/victim")
    options = RedisOptions.from_url(redis_url)
    redis = aioredis.Redis.from_url(options.url)
    owned = Keys(options.prefix, "gensite").owned(victim.incarnation)
    try:
        await eventually(lambda: counting_site.fetched >= PAGES // 3)
        victim.kill()
        await victim.proc.wait()
        in_flight = await redis.scard(owned)
        assert await asyncio.to_thread(gone.wait, 20.0), "the victim's node never went"
        await requeued(redis, owned)
        result = await survivor.finish()
    finally:
        await redis.aclose()
        await asyncio.to_thread(client.stop)
        await asyncio.to_thread(client.close)
    # the survivor gave the victim's leases back on seeing its node go, not at their
    # expiry: it returned what the victim held (how fast: make faults and the benchmarks)
    (recovery,) = result["recoveries"]
    assert recovery["engine_id"] == "victim"
    held = sum(recovery["returned"].values())
    assert held >= in_flight > 0  # (read after the kill, before or after the return)
    assert_every_page_fetched(counting_site)
    assert counting_site.duplicates <= held  # at most the pages in flight at the kill
    assert result["state"] == "finished"


async def test_graceful_stop_mid_crawl_fetches_nothing_twice(
    counting_site: SiteServer, redis_url: str, zk_hosts: str, engines: Callable[..., Any]
) -> None:
    leaver = await engines("leaver", redis_url, zk_hosts, counting_site.base)
    stayer = await engines("stayer", redis_url, zk_hosts, counting_site.base)
    await eventually(lambda: counting_site.fetched >= PAGES // 3)
    leaver.proc.send_signal(signal.SIGTERM)
    left = await leaver.finish()
    stayed = await stayer.finish()
    assert left["state"] == "stopped"
    assert stayed["state"] == "finished"
    assert stayed["recoveries"] == []
    assert_every_page_fetched(counting_site)
    assert counting_site.duplicates == 0


async def test_engines_wait_for_a_restarted_redis_and_finish(
    counting_site: SiteServer, zk_hosts: str, engines: Callable[..., Any], tmp_path: Path
) -> None:
    server = RedisServer(tmp_path / "redis", appendonly=True)
    server.start()
    try:
        first = await engines("first", server.url, zk_hosts, counting_site.base)
        second = await engines("second", server.url, zk_hosts, counting_site.base)
        await eventually(lambda: counting_site.fetched >= PAGES // 3)
        await asyncio.to_thread(server.restart, 1.0)
        during = counting_site.fetched
        results = [await first.finish(), await second.finish()]
    finally:
        server.stop()
    assert during < PAGES
    assert [r["state"] for r in results] == ["finished", "finished"]
    assert_every_page_fetched(counting_site)
    logs = first.log.read_text() + second.log.read_text()
    assert "frontier_unavailable_waiting" in logs
    assert "frontier_available_again" in logs
