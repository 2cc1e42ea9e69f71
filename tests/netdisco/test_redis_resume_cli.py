"""Issue 11: ``netdisco engine`` on a Redis frontier, SIGKILLed halfway, then the same
command again: every page's item is in the output (appended), and only the requests the
killed engine held (leased, not acknowledged) are fetched twice."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import aiohttp
import msgpack
import pytest
from redis import asyncio as aioredis

from netdisco.crawl.codec import PACKED
from netdisco.frontiers.redis import RedisOptions
from netdisco.frontiers.redis.owners import BUCKETS, BucketKeys
from netdisco.testing import eventually, free_port
from tests.netdisco.conftest import PAGES
from tests.netdisco.redis_support import SiteServer, gen_spider_source

CONFIG = """
[engine]
id = "resumer"
port = {port}

[[spiders]]
spider = "{spider}:Gen"
settings = {{ frontier = "{redis}", concurrency = 8, obey_robots = false, progress_interval = 0 }}
"""


async def spider_state(port: int) -> str | None:
    url = f"http://127.0.0.1:{port}/netdiscovery/spiders/gensite"
    try:
        async with aiohttp.ClientSession() as http, http.get(url) as resp:
            state: str = (await resp.json())["state"]
            return state
    except aiohttp.ClientError:
        return None


async def held_paths(url: str, prefix: str, spider: str) -> set[str]:
    """Paths of the requests leased in Redis: taken by an engine and not acknowledged
    (in the buckets of owned hosts)."""
    client = aioredis.Redis.from_url(url)
    bodies = []
    try:
        for bucket in range(BUCKETS):
            keys = BucketKeys.of(prefix, spider, bucket)
            ids = await client.hkeys(keys.owner)
            bodies += [await client.hget(keys.payload, rid) for rid in ids]
    finally:
        await client.aclose()
    return {urlsplit(queued_url(body)).path for body in bodies if body}


def queued_url(body: bytes | str) -> str:
    """The URL of a request as Redis holds it: compact (MessagePack) or JSON."""
    if isinstance(body, bytes) and body.startswith(PACKED):
        fields = msgpack.unpackb(body[len(PACKED) :], raw=True, strict_map_key=False)
        return bytes(fields[b"u"]).decode()
    return str(json.loads(body)["url"])


def start_engine(config: Path, log: Path) -> subprocess.Popen[bytes]:
    argv = [sys.executable, "-m", "netdisco.cli", "--log-json", "engine", "--config", str(config)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("NETDISCO_")}
    with log.open("ab") as out:
        return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env)


@pytest.mark.slow
async def test_engine_on_redis_killed_halfway_then_rerun_loses_no_item(
    tmp_path: Path, counting_site: SiteServer, redis_url: str
) -> None:
    output = tmp_path / "items.jl"
    spider = tmp_path / "gen_spider.py"
    spider.write_text(gen_spider_source(counting_site.base, str(output)))
    port = free_port()
    config = tmp_path / "engine.toml"
    redis = f"{redis_url}&lease_ttl=2"
    config.write_text(CONFIG.format(port=port, spider=spider, redis=redis))
    first = start_engine(config, tmp_path / "engine.log")
    try:
        await eventually(lambda: counting_site.fetched >= PAGES // 2, "half the site")
        first.send_signal(signal.SIGKILL)
        first.wait(10)
        options = RedisOptions.from_url(redis_url)
        held = await held_paths(options.url, options.prefix, "gensite")
        fetched_before = set(counting_site.fetches)
        assert len(fetched_before) < PAGES, "the crawl ended before the kill"
        second = start_engine(config, tmp_path / "engine.log")
        try:

            async def ended() -> str | None:
                assert second.poll() is None, (tmp_path / "engine.log").read_text()[-3000:]
                state = await spider_state(port)
                return state if state in ("finished", "failed", "stopped") else None

            assert await eventually(ended, "the crawl to end", timeout=300) == "finished"
        finally:
            second.send_signal(signal.SIGTERM)
            second.wait(30)
    finally:
        if first.poll() is None:
            first.kill()
    assert counting_site.fetched == PAGES
    assert max(counting_site.fetches.values()) <= 2
    twice = {path for path, n in counting_site.fetches.items() if n == 2}
    assert twice <= held  # only what the killed engine held, not acknowledged
    items = {urlsplit(json.loads(line)["url"]).path for line in output.read_text().splitlines()}
    assert items == set(counting_site.fetches)
