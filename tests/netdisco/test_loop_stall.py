"""A spider callback that blocks the engine's loop is noticed.

Real ZooKeeper and HTTP on loopback. While the loop is blocked, the watchdog thread
marks the znode ``stalled`` (with the lag), then gives the node up past
``loop_stall_drop``; the health request that waited answers 503 with the lag once the
loop runs again, and the engine registers again, no longer stalled. The callback
blocks until a thread has seen the node given up (at most ``BLOCK_CAP`` seconds), so
the watchdog is never raced against a fixed block.
"""

from __future__ import annotations

import asyncio
import json
import threading
import urllib.error
import urllib.request
from collections.abc import AsyncIterator
from typing import Any

from aiohttp import web
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from netdisco import Request, Response, Settings, Spider
from netdisco.engine import SpiderEngine
from netdisco.engine.config import EngineSettings
from netdisco.testing import eventually, serve

#: the longest the callback blocks the loop: the test fails, rather than hangs, past it
BLOCK_CAP = 30.0


async def page(_request: web.Request) -> web.Response:
    return web.Response(text="<html>ok</html>", content_type="text/html")


class Blocking(Spider):
    name = "blocking"

    def __init__(self, base: str) -> None:
        super().__init__()
        self.base = base
        self.go = asyncio.Event()  # the test lets it block once the engine is registered
        self.release = threading.Event()  # set by the Watcher once the node was given up
        self.released: bool | None = None  # whether it was released before the cap

    async def start(self) -> AsyncIterator[Request]:
        await self.go.wait()
        yield Request(self.base + "/")

    def parse(self, response: Response) -> Any:
        self.released = self.release.wait(BLOCK_CAP)  # blocks the engine's loop till then
        yield {"url": response.url}


class Watcher(threading.Thread):
    """Reads the engine's node from a thread of its own while the loop is blocked, asks
    ``/health`` once the node says stalled, and sets ``release`` once it is gone after."""

    def __init__(self, hosts: str, path: str, port: int, release: threading.Event) -> None:
        super().__init__(daemon=True)
        self.client = KazooClient(hosts=hosts)
        self.client.start(timeout=15)
        self.path, self.port, self.release = path, port, release
        self.seen: list[dict[str, Any] | None] = []
        self.health: tuple[int, dict[str, Any]] | None = None
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(0.05):
            try:
                data = json.loads(self.client.get(self.path)[0])
            except NoNodeError:  # given up (or not there yet): the thread must go on
                data = None
            self.seen.append(data)
            if data and data.get("stalled") and self.health is None:
                self.health = (0, {})
                threading.Thread(target=self._ask, daemon=True).start()
            if data is None and self.health is not None:  # given up after it said stalled
                self.release.set()

    def _ask(self) -> None:
        url = f"http://127.0.0.1:{self.port}/netdiscovery/health"
        try:
            with urllib.request.urlopen(url, timeout=30) as reply:
                self.health = (reply.status, json.loads(reply.read()))
        except urllib.error.HTTPError as exc:
            self.health = (exc.code, json.loads(exc.read()))

    def close(self) -> None:
        self.done.set()
        self.join()
        self.client.stop()
        self.client.close()


async def test_a_blocked_loop_is_marked_stalled_dropped_and_registers_again(
    zk_hosts: str,
) -> None:
    app = web.Application()
    app.router.add_get("/", page)
    settings = EngineSettings(id="stuck", port=0, loop_stall=1.0, loop_stall_drop=2.5)
    zookeeper = {"hosts": zk_hosts, "session_timeout": 10.0}
    async with serve(app) as base, SpiderEngine(settings, zookeeper=zookeeper) as engine:
        spider = Blocking(base)
        engine.add_spider(spider, Settings(progress_interval=0))
        await engine.start()
        assert engine.registry is not None
        await eventually(lambda: engine.registry_healthy, "registered")
        watcher = Watcher(zk_hosts, "/netdiscovery/stuck", engine.port, spider.release)
        watcher.start()
        spider.go.set()
        try:
            await engine.wait()  # the callback blocks the loop in here, until released
            registry = engine.registry
            await eventually(lambda: registry.status()["registrations"] == 2)
            await eventually(lambda: (watcher.seen[-1] or {}).get("stalled") is False)
        finally:
            watcher.close()
    assert spider.released, "the node was not marked stalled, then given up, while blocked"
    facts = next(d for d in watcher.seen if d)["facts"]  # node facts are in the znode
    assert facts["rss"] > 0
    stalled = [d for d in watcher.seen if d and d.get("stalled")]
    assert stalled, "the node never said stalled"
    assert stalled[0]["loop_lag"] >= 1.0
    first = watcher.seen.index(stalled[0])
    assert None in watcher.seen[first:], "the node was not given up past loop_stall_drop"
    assert watcher.health is not None
    status, body = watcher.health
    # the request waited out the block; when the loop runs again, the heartbeat that
    # clears ``stalled`` may come before it is answered (a race of the two callbacks)
    assert (status, body["status"]) in ((503, "stalled"), (200, "ok")), watcher.health
    if status == 503:
        assert body["loop_lag"] >= 1.0
