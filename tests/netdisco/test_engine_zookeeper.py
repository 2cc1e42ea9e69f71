"""SpiderEngine wired to real ZooKeeper registration (the registry itself is tested elsewhere)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import aiohttp
import pytest
from kazoo.client import KazooClient

from netdisco.crawl.settings import Settings
from netdisco.engine import SpiderEngine
from netdisco.engine.config import EngineSettings
from netdisco.exceptions import ConfigError
from netdisco.testing import eventually

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
