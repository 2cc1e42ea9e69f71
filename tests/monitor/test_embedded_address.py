"""The address an embedded engine advertises is the one it is served at, and the monitor
believes an address only when the engine answering there is the engine it asked.

Real engines in the test's loop (one mounted under a prefix of an aiohttp application,
as docs/embedding.md shows), the test's real ZooKeeper, a real monitor polling them.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import aiohttp
import pytest
from aiohttp import web
from structlog.testing import capture_logs

from monitor.control import Control
from monitor.settings import ControlSettings
from netdisco import EngineSettings, Spider, SpiderEngine, SpiderState, create_app
from netdisco.cluster.contract import ENGINE_HEADER
from netdisco.exceptions import ControlRefused
from netdisco.testing import eventually, free_port
from tests.monitor.conftest import monitor_config


class Idle(Spider):
    """Seeds nothing and waits for pushes (keep-alive): it runs as long as the engine."""

    name = "idle"


def registered_engine(zk_hosts: str, engine_id: str, **settings: object) -> SpiderEngine:
    engine = SpiderEngine(
        EngineSettings(id=engine_id, **settings),  # type: ignore[arg-type]
        zookeeper={"hosts": zk_hosts, "session_timeout": 4.0},
    )
    engine.add_spider(Idle, keep_alive=True)
    return engine


@asynccontextmanager
async def application(engine: SpiderEngine, port: int, prefix: str) -> AsyncIterator[None]:
    """An application of its own on ``port`` with the engine's routes under ``prefix``."""

    async def own_page(_request: web.Request) -> web.Response:
        return web.Response(text="the app's own page")

    app = web.Application()
    app.router.add_get("/", own_page)
    app.add_subapp(prefix, create_app(engine))
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        async with engine:
            await engine.start()
            yield
    finally:
        await runner.cleanup()


async def test_a_mounted_engine_is_advertised_polled_and_controlled_under_its_prefix(
    zk_hosts, start_monitor
):
    port = free_port()
    base = f"http://127.0.0.1:{port}/crawler"
    engine = registered_engine(zk_hosts, "mounted", http=False, port=port, advertise_url=base)
    config = monitor_config(zk_hosts, http={"poll_status": 0.1})
    monitor, _rec = await start_monitor(config)
    async with application(engine, port, "/crawler"):
        await eventually(lambda: monitor.watcher.members(), "registered", timeout=30)
        (member,) = monitor.watcher.members()
        assert member.payload.status_url == f"{base}/netdiscovery/engine"
        assert (member.payload.host, member.payload.port) == ("127.0.0.1", port)
        await eventually(
            lambda: (
                monitor.status.rates.get("mounted")
                and monitor.status.rates["mounted"].pages_per_second is not None
            ),
            "the monitor reads the mounted engine's rate",
        )
        async with aiohttp.ClientSession() as session:
            async with session.get(f"{base}/", allow_redirects=False) as resp:
                assert resp.status == 302
                assert resp.headers["Location"] == "/crawler/netdiscovery/engine"
                assert resp.headers[ENGINE_HEADER] == "mounted"
            async with session.get(f"{base}/netdiscovery/engine") as resp:
                assert json.loads(await resp.text())["status_url"] == member.payload.status_url
        control = Control(ControlSettings(), monitor.watcher.members)
        try:
            status, body = await control.act("mounted", "idle", "pause")
        finally:
            await control.close()
        assert (status, body["state"]) == (200, "paused")
        assert engine.crawler("idle").state is SpiderState.PAUSED


@pytest.fixture
async def impostor() -> AsyncIterator[SpiderEngine]:
    """A standalone engine of another id, serving its routes on a port of its own."""
    engine = SpiderEngine(EngineSettings(id="impostor", port=0))
    engine.add_spider(Idle, keep_alive=True)
    async with engine:
        await engine.start()
        yield engine


async def test_another_engine_on_the_advertised_port_is_refused_not_shown(
    zk_hosts, start_monitor, impostor
):
    elsewhere = f"http://127.0.0.1:{impostor.port}"  # served by the impostor, not by us
    victim = registered_engine(zk_hosts, "victim", http=False, advertise_url=elsewhere)
    config = monitor_config(zk_hosts, http={"poll_status": 0.1})
    monitor, _rec = await start_monitor(config)
    async with victim:
        await victim.start()
        await eventually(lambda: "victim" in monitor.status.rates, "polled", timeout=30)
        rate = monitor.status.rates["victim"]
        assert (rate.pages_per_second, rate.error) == (None, "wrong_engine")
        assert monitor.history.engine_rate("victim") is None  # nothing of it shown
        control = Control(ControlSettings(), monitor.watcher.members)
        try:
            with pytest.raises(ControlRefused) as refused:
                await control.act("victim", "idle", "pause")
        finally:
            await control.close()
        assert refused.value.code == "wrong_engine"
        assert impostor.crawler("idle").state is SpiderState.RUNNING  # untouched
    async with (  # asked directly with another id, the impostor refuses to act
        aiohttp.ClientSession() as session,
        session.post(
            f"{elsewhere}/netdiscovery/spiders/idle/pause", headers={ENGINE_HEADER: "victim"}
        ) as resp,
    ):
        assert resp.status == 409
        assert (await resp.json())["error"]["code"] == "wrong_engine"
    assert impostor.crawler("idle").state is SpiderState.RUNNING


async def test_routes_mounted_elsewhere_than_advertised_are_reported_at_start():
    port = free_port()
    wrong = f"http://127.0.0.1:{port}/engine"  # the app mounts the routes at /crawler
    engine = SpiderEngine(EngineSettings(id="misplaced", http=False, advertise_url=wrong))
    with capture_logs() as logs:
        async with application(engine, port, "/crawler"):
            pass
    said = [e for e in logs if e["event"] == "engine_mount_mismatch"]
    assert len(said) == 1, logs
    assert said[0]["served_under"] == "/crawler"
    assert said[0]["hint"] == "set advertise_url to http(s)://HOST:PORT/crawler"
