"""``/netdiscovery/spiders/{name}/failed`` over real HTTP: list, retry, delete, bad input."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import aiohttp

from netdisco.crawl.settings import Settings
from netdisco.engine import SpiderEngine
from netdisco.engine.config import EngineSettings
from netdisco.testing import eventually, serve
from tests.netdisco.test_frontier_contract import Holding, failing_app

TOKEN = "tok-0123456789abcdef"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


async def test_failed_requests_are_listed_retried_and_deleted() -> None:
    hits: Counter[str] = Counter()
    async with serve(failing_app(hits, [1])) as site:
        spider = type("Holding", (Holding,), {"name": "held"})(site)
        spider.release = asyncio.Event()
        async with SpiderEngine(EngineSettings(id="e-failed", port=0, token=TOKEN)) as engine:
            engine.add_spider(spider, Settings(progress_interval=0, retries=0))
            await engine.start()
            base = f"http://127.0.0.1:{engine.port}/netdiscovery/spiders/held/failed"
            async with aiohttp.ClientSession() as http:

                async def call(method: str, url: str, **kw: Any) -> tuple[int, Any]:
                    async with http.request(method, url, **kw) as response:
                        return response.status, await response.json()

                async def listed() -> Any:
                    status, body = await call("GET", base)
                    return body if status == 200 and body["total"] == 2 else None

                body = await eventually(listed, "both failures are kept")
                assert (body["spider"], body["dropped"]) == ("held", 0)
                assert body["by_reason"] == {"http_404": 1, "http_500": 1}
                broken = next(r for r in body["failed"] if r["url"].endswith("/broken"))
                assert (broken["method"], broken["status"]) == ("GET", 500)
                assert (broken["reason"], broken["attempts"]) == ("http_500", 1)
                assert set(broken) == {
                    "id", "url", "method", "reason", "status", "error", "message",
                    "attempts", "last_at",
                }  # fmt: skip
                status, only = await call("GET", base + "?reason=http_404&limit=1")
                assert (status, only["total"], len(only["failed"])) == (200, 1, 1)
                for query in ("reason=../x", "limit=5000", "offset=-1", "reason=A"):
                    assert (await call("GET", f"{base}?{query}"))[0] == 400
                assert (await call("POST", base + "/retry", json={}))[0] == 401
                bodies: list[Any] = [{"ids": ["zz"]}, {"reason": 1}, {"reason": "a", "ids": []}, []]
                for bad in bodies:
                    status, _ = await call("POST", base + "/retry", json=bad, headers=AUTH)
                    assert status == 400, bad
                retry = {"ids": [broken["id"]]}
                assert await call("POST", base + "/retry", json=retry, headers=AUTH) == (
                    200,
                    {"requeued": 1},
                )
                async with http.get(f"http://127.0.0.1:{engine.port}/metrics") as response:
                    metrics = await response.text()
                assert 'netdisco_failed_requests_total{reason="http_500",spider="held"} 1.0' in (
                    metrics
                )
                deleted = await call("DELETE", base + "?reason=http_404", headers=AUTH)
                assert deleted == (200, {"deleted": 1})
                spider.release.set()
                await engine.wait()
                assert hits["/broken"] == 2
                assert (await call("POST", base + "/retry", json={}, headers=AUTH))[0] == 409
                assert (await call("GET", base))[1]["total"] == 0
