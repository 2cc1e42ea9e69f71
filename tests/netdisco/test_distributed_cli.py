"""Issue 7's "done when": two ``netdisco engine`` processes share a Redis frontier;
one is SIGKILLed halfway; the other finishes the crawl with no page missing.

Everything is real: the CLI, Redis, ZooKeeper (the survivor learns of the loss
from the registry and re-queues the dead engine's leases), and the site.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path

import aiohttp
import pytest

from netdisco.frontiers.redis.options import RedisOptions, connect
from netdisco.testing import eventually, free_port
from tests.netdisco.conftest import PAGES
from tests.netdisco.redis_support import SiteServer, gen_spider_source

CONFIG = """
[engine]
id = "{name}"
port = {port}

[zookeeper]
hosts = "{zk}"
session_timeout = 2.0

[[spiders]]
spider = "{spider}:Gen"
settings = {{ frontier = "{redis}", concurrency = 8, obey_robots = false, progress_interval = 0 }}
"""


def start_engine(
    tmp: Path, name: str, spider: Path, zk: str, redis: str
) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    config = tmp / f"{name}.toml"
    config.write_text(CONFIG.format(name=name, port=port, zk=zk, spider=spider, redis=redis))
    with (tmp / f"{name}.log").open("wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "netdisco.cli", "--log-json", "engine", "--config", str(config)],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={k: v for k, v in os.environ.items() if not k.startswith("NETDISCO_")},
        )
    return proc, port


async def spider_state(port: int) -> str | None:
    url = f"http://127.0.0.1:{port}/netdiscovery/spiders/gensite"
    try:
        async with aiohttp.ClientSession() as http, http.get(url) as resp:
            state: str = (await resp.json())["state"]
            return state
    except aiohttp.ClientError:
        return None


@pytest.mark.slow
async def test_sigkill_halfway_loses_no_page(
    tmp_path: Path, counting_site: SiteServer, zk_hosts: str, redis_url: str
) -> None:
    spider = tmp_path / "gen_spider.py"
    spider.write_text(gen_spider_source(counting_site.base))
    first, _ = start_engine(tmp_path, "cli-a", spider, zk_hosts, redis_url)
    second, port = start_engine(tmp_path, "cli-b", spider, zk_hosts, redis_url)
    try:
        await eventually(lambda: counting_site.fetched >= PAGES // 2)
        first.send_signal(signal.SIGKILL)
        assert first.wait(10) == -signal.SIGKILL
        held = await leases_held(redis_url)  # before the survivor learns of the loss (2 s)
        while await spider_state(port) != "finished":
            assert second.poll() is None, (tmp_path / "cli-b.log").read_text()[-3000:]
            await asyncio.sleep(0.2)
        assert counting_site.fetched == PAGES
        # only what the killed engine held (in flight, prefetched, done but not yet acked:
        # acks wait for the items' flush) may be fetched twice
        assert counting_site.duplicates <= held
        second.send_signal(signal.SIGTERM)
        assert second.wait(20) == 0
    finally:
        for proc in (first, second):
            if proc.poll() is None:
                proc.kill()
                proc.wait(5)


async def leases_held(redis_url: str) -> int:
    """Every engine's leases in the crawl now (the owned sets of every incarnation)."""
    options = RedisOptions.from_url(redis_url)
    client = connect(options.url)
    try:
        owned = [key async for key in client.scan_iter(f"{options.prefix}:*:owned:*")]
        return sum([int(await client.scard(key)) for key in owned])
    finally:
        await client.aclose()


def test_unreachable_redis_fails_at_start_with_the_reason(tmp_path: Path) -> None:
    config = tmp_path / "engine.toml"
    url = f"redis://127.0.0.1:{free_port()}/0"
    config.write_text(
        '[engine]\nid = "lonely"\nport = 0\n\n[[spiders]]\nspider = "netdisco.demo.site:Shop"\n'
        f'settings = {{ frontier = "{url}" }}\n'
    )
    done = subprocess.run(
        [sys.executable, "-m", "netdisco.cli", "engine", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
        env={k: v for k, v in os.environ.items() if not k.startswith("NETDISCO_")},
    )
    assert done.returncode == 2
    assert f"cannot reach Redis at {url}" in done.stderr
