"""Liveness and readiness through a ZooKeeper outage (a ZooKeeper server of the test's own).

Readiness (registered, able to take work) goes false while ZooKeeper is down and comes
back with it; liveness (the loop answers) stays true throughout, so a Kubernetes liveness
probe never restarts an engine that crawls on through an outage. Both answer ``HEAD``;
both are served in the engine's loop and by the status process (``api_process``).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from functools import partial
from pathlib import Path

import aiohttp
import pytest

from netdisco import EngineSettings, Spider, SpiderEngine, SpiderState
from netdisco._servers import ZooKeeperServer
from netdisco.cluster.contract import ENGINE_HEADER
from netdisco.testing import eventually


class Idle(Spider):
    name = "idle"


@pytest.fixture
async def own_zookeeper(tmp_path: Path) -> AsyncIterator[ZooKeeperServer]:
    server = ZooKeeperServer(data_dir=tmp_path / "zk")
    await asyncio.to_thread(server.start)
    yield server
    await asyncio.to_thread(server.close)


async def probe(session: aiohttp.ClientSession, base: str, name: str) -> tuple[int, int]:
    """The status of ``GET`` and of ``HEAD`` of ``/netdiscovery/<name>``."""
    url = f"{base}/netdiscovery/{name}"
    async with session.get(url) as got:
        assert got.headers[ENGINE_HEADER] == "probed"
        body = await got.json()
        assert body["id"] == "probed"
    async with session.head(url) as head:
        assert await head.read() == b""
    return got.status, head.status


@pytest.mark.parametrize("api_process", [False, True], ids=["in-loop", "status-process"])
async def test_readiness_follows_zookeeper_liveness_does_not(own_zookeeper, api_process):
    settings = EngineSettings(id="probed", port=0, api_process=api_process)
    engine = SpiderEngine(
        settings, zookeeper={"hosts": own_zookeeper.hosts, "session_timeout": 2.0}
    )
    engine.add_spider(Idle, keep_alive=True)
    async with engine, aiohttp.ClientSession() as session:
        await engine.start()
        base = f"http://127.0.0.1:{engine.port}"

        async def statuses(name: str) -> tuple[int, int]:
            return await probe(session, base, name)

        async def readiness(wanted: int) -> bool:
            return await statuses("ready") == (wanted, wanted)

        await eventually(lambda: engine.registry_healthy is True, "registered", timeout=30)
        await eventually(partial(readiness, 200), "ready", timeout=10)
        assert await statuses("live") == (200, 200)

        await asyncio.to_thread(own_zookeeper.stop)
        await eventually(partial(readiness, 503), "not ready", timeout=30)
        assert await statuses("live") == (200, 200)
        assert engine.crawler("idle").state is SpiderState.RUNNING

        await asyncio.to_thread(own_zookeeper.start)
        await eventually(partial(readiness, 200), "ready again", timeout=60)
        assert await statuses("live") == (200, 200)
