"""The HTTP routes over real sockets, and the dashboard in headless Chromium."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from monitor.status import spiders_url, total_rate
from netdisco.cluster.contract import ENGINE_HEADER
from netdisco.testing import eventually, free_port
from tests.monitor.conftest import monitor_config

CHROMIUM = Path("/usr/bin/chromium")


async def _get(url: str) -> tuple[int, Any, str]:
    async with aiohttp.ClientSession() as session, session.get(url) as resp:
        text = await resp.text()
        body = json.loads(text) if resp.content_type == "application/json" else text
        return resp.status, body, resp.content_type


async def test_routes(zk_hosts, start_monitor, engines):
    monitor, rec = await start_monitor(monitor_config(zk_hosts))
    base = monitor.http.url
    engine = await asyncio.to_thread(engines, "h1")
    await asyncio.to_thread(engine.join)
    await eventually(lambda: rec.of("engine_joined", "h1"))

    status, body, _ = await _get(f"{base}/netdiscovery/monitor")
    assert status == 200
    assert body["zookeeper"] == {"connected": True, "fresh": True}
    (item,) = body["engines"]
    assert item["id"] == "h1"
    assert item["state"] == "running"
    assert item["status_url"].startswith("http://127.0.0.1:8715/")
    assert item["incarnation"]
    assert item["since_iso"].endswith("Z")

    status, body, _ = await _get(f"{base}/netdiscovery/events")
    assert status == 200
    assert [e["type"] for e in body["events"]] == ["engine_joined"]
    seq = body["events"][0]["seq"]
    status, body, _ = await _get(f"{base}/netdiscovery/events?since={seq}")
    assert body["events"] == []

    status, body, _ = await _get(f"{base}/netdiscovery/health")
    assert (status, body["status"], body["engines"]) == (200, "ok", 1)

    status, text, ctype = await _get(f"{base}/metrics")
    assert status == 200
    assert ctype == "text/plain"
    assert "netdisco_monitor_engines_online 1.0" in text
    assert 'netdisco_monitor_events_total{type="engine_joined"} 1.0' in text

    status, body, _ = await _get(f"{base}/netdiscovery/events?limit=many")
    assert status == 400
    assert body["error"]["code"] == "bad_request"
    status, body, _ = await _get(f"{base}/netdiscovery/nothing")
    assert status == 404
    assert body["error"]["code"] == "not_found"

    status, html, ctype = await _get(f"{base}/")
    assert (status, ctype) == (200, "text/html")
    assert '<script type="module" src="/static/engines.js">' in html
    status, script, ctype = await _get(f"{base}/static/engines.js")
    assert (status, ctype) == (200, "text/javascript")
    assert "/netdiscovery/monitor" in script
    for bad in ("..%2Fhttp.py", "common.py", "x.js"):
        status, _, _ = await _get(f"{base}/static/{bad}")
        assert status == 404, bad


async def test_health_is_503_while_disconnected():
    from monitor.daemon import Monitor
    from tests.monitor.conftest import Recorder

    config = monitor_config(f"127.0.0.1:{free_port()}")  # nobody listens there
    monitor = Monitor(config)
    Recorder(monitor)
    await monitor.start()
    try:
        status, body, _ = await _get(f"{monitor.http.url}/netdiscovery/health")
        assert status == 503
        assert body["reason"] == "not connected to ZooKeeper"
    finally:
        await monitor.close()


class Page:
    """One Chromium tab driven over the DevTools protocol (a websocket, via aiohttp)."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws
        self.ids = itertools.count(1)

    async def eval(self, expression: str) -> Any:
        msg_id = next(self.ids)
        params = {"expression": expression, "returnByValue": True}
        await self.ws.send_json({"id": msg_id, "method": "Runtime.evaluate", "params": params})
        while True:
            reply = await self.ws.receive_json()
            if reply.get("id") == msg_id:
                return reply["result"]["result"].get("value")


@contextlib.asynccontextmanager
async def chromium(url: str, profile: Path) -> AsyncIterator[Page]:
    port = free_port()
    proc = await asyncio.create_subprocess_exec(
        str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
        "--no-first-run", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", f"--user-data-dir={profile}", "--remote-debugging-address=127.0.0.1",
        f"--remote-debugging-port={port}", url,
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    try:
        async with aiohttp.ClientSession() as session:
            target = await _page_target(session, port, url)
            async with session.ws_connect(target, max_msg_size=0) as ws:
                yield Page(ws)
    finally:
        proc.kill()
        await proc.wait()


async def _page_target(session: aiohttp.ClientSession, port: int, url: str) -> str:
    for _ in range(300):
        with contextlib.suppress(aiohttp.ClientError):
            async with session.get(f"http://127.0.0.1:{port}/json/list") as resp:
                for target in await resp.json():
                    if target.get("type") == "page" and target.get("url", "").startswith(url):
                        return str(target["webSocketDebuggerUrl"])
        await asyncio.sleep(0.1)
    raise AssertionError("Chromium did not open the dashboard")


@pytest.mark.browser
@pytest.mark.skipif(
    not CHROMIUM.exists(), reason="/usr/bin/chromium absent (make test installs it)"
)
async def test_dashboard_shows_an_engine_come_and_go(zk_hosts, start_monitor, engines, tmp_path):
    assert shutil.which(str(CHROMIUM))
    monitor, _ = await start_monitor(monitor_config(zk_hosts))
    url = f"{monitor.http.url}/?interval=200"
    async with chromium(url, tmp_path / "profile") as page:

        async def poll(expression: str, expected: Any, what: str) -> None:
            value: list[Any] = [None]

            async def check() -> bool:
                value[0] = await page.eval(expression)
                return bool(value[0] == expected)

            deadline = asyncio.get_running_loop().time() + 30
            while not await check():
                assert asyncio.get_running_loop().time() < deadline, f"{what}: {value[0]!r}"
                await asyncio.sleep(0.1)

        rows = "[...document.querySelectorAll('#engines tr')].map(r => r.dataset.engine || '')"
        await poll("document.getElementById('status').textContent", "live", "status badge")
        await page.eval("window.__sameLoad = true")  # gone if the page ever reloads
        engine = await asyncio.to_thread(engines, "dash1")
        await asyncio.to_thread(engine.join)
        await poll(rows, ["dash1"], "engine row")
        await asyncio.to_thread(engine.leave)
        kept = "[...document.querySelectorAll('#engines tr')].map(r => r.dataset.offline || '')"
        await poll(kept, ["left"], "engine row kept, offline")  # the dashboard keeps the dead
        changes = "[...document.querySelectorAll('#changes li')].map(li => li.dataset.change)"
        await poll(changes, ["+dash1", "-dash1"], "changes seen by the page")
        events = "document.getElementById('events').textContent"
        assert "engine_left dash1" in await page.eval(events)
        assert await page.eval("window.__sameLoad") is True


def test_spiders_url_and_total_rate():
    assert spiders_url("http://h:1/netdiscovery/engine") == "http://h:1/netdiscovery/spiders"
    assert spiders_url("http://h:1/netdiscovery/engine#x") == "http://h:1/netdiscovery/spiders"
    assert spiders_url("file:///etc/passwd") is None
    assert spiders_url("http://h:1/other") is None
    assert total_rate([{"pages_per_second": 1.5}, {"pages_per_second": None}, {}]) == 1.5
    assert total_rate({"spiders": [{"pages_per_second": 2}]}) == 2.0
    with pytest.raises(ValueError, match="no spider list"):
        total_rate({"error": "x"})


async def test_pages_per_second_read_from_the_engine(zk_hosts, start_monitor, engines):
    async def spiders(request: web.Request) -> web.Response:
        rates = [{"name": "a", "pages_per_second": 12.5}, {"name": "b", "pages_per_second": 3}]
        return web.json_response(rates, headers={ENGINE_HEADER: "fast"})

    app = web.Application()
    app.router.add_get("/netdiscovery/spiders", spiders)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        config = monitor_config(zk_hosts, http={"poll_status": 0.1})
        monitor, _ = await start_monitor(config)
        fast, dead = (
            await asyncio.to_thread(engines, "fast"),
            await asyncio.to_thread(engines, "dead"),
        )
        await asyncio.to_thread(
            fast.join, status_url=f"http://127.0.0.1:{port}/netdiscovery/engine"
        )
        await asyncio.to_thread(
            dead.join, status_url=f"http://127.0.0.1:{free_port()}/netdiscovery/engine"
        )

        def rates() -> dict[str, Any]:
            return {e["id"]: e["pages_per_second"] for e in monitor.snapshot()["engines"]}

        await eventually(lambda: rates().get("fast") == 15.5, what="the rate of the live engine")
        # the two joins reach the monitor one after the other (seconds apart under load)
        await eventually(
            lambda: "dead" in monitor.status.rates, what="a poll of the unreachable engine"
        )
        assert rates()["dead"] is None  # unreachable: unknown, and still a member
        assert monitor.status.rates["dead"].error == "ClientConnectorError"
    finally:
        await runner.cleanup()
