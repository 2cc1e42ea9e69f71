"""SpiderEngine wired to real ZooKeeper registration (the registry itself is tested elsewhere)."""

from __future__ import annotations

import asyncio
import calendar
import json
import re
import time
from collections.abc import Iterator
from typing import Any

import aiohttp
import pytest
import structlog
from kazoo.client import KazooClient

from netdisco.crawl.settings import Settings
from netdisco.engine import SpiderEngine
from netdisco.engine.config import EngineSettings
from netdisco.exceptions import ConfigError
from netdisco.testing import eventually, free_port

from .engine_site import site_spider


@pytest.fixture
def reader(zk_hosts: str) -> Iterator[KazooClient]:
    client = KazooClient(hosts=zk_hosts)
    client.start(timeout=15)
    yield client
    client.stop()
    client.close()


def node(client: KazooClient, path: str) -> dict[str, object] | None:
    if client.exists(path) is None:
        return None
    data: dict[str, object] = json.loads(client.get(path)[0])
    return data


def spiders(data: dict[str, Any] | None) -> list[dict[str, Any]]:
    found = (data or {}).get("spiders")
    return found if isinstance(found, list) else []


async def test_engine_registers_updates_and_leaves(
    zk_hosts: str, reader: KazooClient, site: str
) -> None:
    zookeeper = {"hosts": zk_hosts, "session_timeout": 2.0}
    engine = SpiderEngine(EngineSettings(id="zk-engine", port=0), zookeeper=zookeeper)
    engine.add_spider(site_spider("one", site, "slow"), Settings(progress_interval=0))
    path = "/netdiscovery/zk-engine"
    await engine.start()
    try:
        await eventually(lambda: (node(reader, path) or {}).get("spiders") is not None)
        data = node(reader, path)
        assert data is not None
        assert (data["id"], data["incarnation"], data["port"]) == (
            "zk-engine", engine.incarnation, engine.port,
        )  # fmt: skip
        engine.pause("one")
        await eventually(
            lambda: (
                [(s["name"], s["state"]) for s in spiders(node(reader, path))]
                == [("one", "paused")]
            )
        )
        async with aiohttp.ClientSession() as session:
            url = f"http://127.0.0.1:{engine.port}/netdiscovery/engine"
            async with session.get(url) as response:
                body = await response.json()
        assert body["registry"]["state"] == "registered"
    finally:
        await asyncio.wait_for(engine.stop(), 30)
    assert reader.exists(path) is None


def test_a_bad_zookeeper_table_names_the_key() -> None:
    with pytest.raises(ConfigError) as info:
        SpiderEngine(EngineSettings(), zookeeper={"hosts": "127.0.0.1:2181", "bogus": 1})
    assert info.value.key == "zookeeper.bogus"


async def test_an_unreachable_zookeeper_is_named_in_the_log_health_and_status(site: str) -> None:
    hosts = f"127.0.0.1:{free_port()}"  # nothing listens there
    zookeeper = {"hosts": f"{hosts}/chroot", "session_timeout": 0.5}
    engine = SpiderEngine(EngineSettings(id="lonely", port=0), zookeeper=zookeeper)
    engine.add_spider(site_spider("one", site, "slow"), Settings(progress_interval=0))
    said = re.compile(
        rf"unregistered: ZooKeeper {re.escape(hosts)} unreachable since "
        r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ)$"
    )
    with structlog.testing.capture_logs() as logs:
        before = time.time()
        await engine.start()
        try:
            await eventually(lambda: said.match(engine.registry_said) is not None, "named")
            base = f"http://127.0.0.1:{engine.port}/netdiscovery"
            async with aiohttp.ClientSession() as session:
                async with session.get(f"{base}/health") as response:
                    health = (response.status, await response.json())
                async with session.get(f"{base}/engine") as response:
                    status = await response.json()
        finally:
            await asyncio.wait_for(engine.stop(), 30)
    assert health[0] == 503
    assert health[1]["status"] == "degraded"
    found = said.match(health[1]["registry_detail"])
    assert found is not None, health
    since = calendar.timegm(time.strptime(found.group(1), "%Y-%m-%dT%H:%M:%SZ"))
    assert before - 1 <= since <= time.time()
    assert said.match(status["registry"]["detail"]), status["registry"]
    (warning,) = [e for e in logs if e["log_level"] == "warning" and "unreachable" in e["event"]]
    assert (warning["hosts"], warning["since"]) == (hosts, found.group(1))
