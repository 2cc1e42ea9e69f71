"""A real engine registered in the test's ZooKeeper, crawling a slow loopback site,
and a monitor that may steer it: what the control and dashboard tests share."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from typing import Any

import aiohttp
from aiohttp import web

from monitor.settings import ControlSettings, MonitorConfig
from netdisco.crawl.settings import Settings
from netdisco.engine import SpiderEngine
from netdisco.engine.config import EngineSettings
from netdisco.engine.schedules import Schedule
from tests.monitor.conftest import monitor_config
from tests.monitor.fake_engines import ENGINE_TOKEN as ENGINE_TOKEN
from tests.netdisco.engine_site import site_spider

MONITOR_TOKEN = "monitor-tok-9876543210"
#: one page at a time, 0.25 s apart, on the slow pages: the 200-page tree takes a minute
#: and more, so it still runs when a slow browser gets to its buttons
SLOW = Settings(progress_interval=0, concurrency=1, download_delay=0.25)


async def real_engine(zk_hosts: str, site: str, engine_id: str = "crawler-1") -> SpiderEngine:
    """Started, registered, with a slow spider and one that waits for its hourly run."""
    settings = EngineSettings(id=engine_id, port=0, token=ENGINE_TOKEN)
    engine = SpiderEngine(settings, zookeeper={"hosts": zk_hosts, "session_timeout": 4.0})
    engine.add_spider(site_spider("slowtree", site, "slow"), SLOW)
    engine.add_spider(site_spider("hourly", site), SLOW, schedule=Schedule(every=3600.0))
    await engine.start()
    return engine


def steering(zk_hosts: str, token: str | None = MONITOR_TOKEN, **http: Any) -> MonitorConfig:
    """A test monitor with ``[control]``: polls every 0.2 s, gives up on an engine after 2 s."""
    config = monitor_config(zk_hosts, http={"poll_status": 0.2, **http})
    control = ControlSettings(engine_token=ENGINE_TOKEN, token=token, timeout=2.0)
    return replace(config, control=control)


async def post(url: str, headers: dict[str, str] | None = None) -> tuple[int, Any]:
    async with aiohttp.ClientSession() as session, session.post(url, headers=headers) as resp:
        return resp.status, json.loads(await resp.text())


def control_url(base: str, engine: str, spider: str, action: str) -> str:
    return f"{base}/netdiscovery/monitor/engines/{engine}/spiders/{spider}/{action}"


async def hanging_server(port: int) -> web.AppRunner:
    """Accepts connections and never answers a control call: an engine that hangs."""

    never = asyncio.Event()

    async def hang(request: web.Request) -> web.Response:
        await never.wait()
        return web.Response()

    app = web.Application()
    app.router.add_post("/netdiscovery/spiders/{name}/{action}", hang)
    runner = web.AppRunner(app, shutdown_timeout=0.1)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    return runner
