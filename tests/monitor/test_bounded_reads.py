"""What a znode or a status_url serves cannot fill the monitor's memory (issue 27, finding 7).

Node data past ``MAX_NODE_DATA`` is garbage, never decoded; an engine's answer
past ``MAX_ANSWER`` is not read further; both are counted in the monitor's view
and its metrics.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import pytest
from aiohttp import web
from prometheus_client.parser import text_string_to_metric_families

from netdisco.cluster.contract import ENGINE_HEADER
from netdisco.testing import eventually, serve
from tests.monitor.conftest import monitor_config
from tests.monitor.test_http import _get

MAX_NODE_DATA = 64 * 1024  # netdisco.cluster.contract.MAX_NODE_DATA
MAX_ANSWER = 1 << 20  # monitor.status.MAX_ANSWER


@pytest.fixture
async def huge_status() -> AsyncIterator[int]:
    """A loopback 'engine' whose spider list is 4 MiB, chunked (no Content-Length)."""

    async def spiders(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={ENGINE_HEADER: request.headers[ENGINE_HEADER]})
        await resp.prepare(request)
        await resp.write(b"[")
        item = json.dumps({"name": "x" * 1000, "pages_per_second": 1}).encode()
        for _ in range(4 * MAX_ANSWER // len(item)):
            await resp.write(item + b",")
        await resp.write(item + b"]")
        return resp

    app = web.Application()
    app.router.add_get("/netdiscovery/spiders", spiders)
    async with serve(app) as base:
        yield int(base.rsplit(":", 1)[1])


def _dropped(text: str) -> dict[str, float]:
    return {
        s.labels["what"]: s.value
        for family in text_string_to_metric_families(text)
        if family.name == "netdisco_monitor_dropped"
        for s in family.samples
        if s.name.endswith("_total")
    }


async def test_oversized_nodes_and_answers_are_dropped_and_counted(
    zk_hosts, start_monitor, engines, huge_status
) -> None:
    config = monitor_config(zk_hosts, http={"poll_status": 0.2})
    monitor, _ = await start_monitor(config)
    big, slow = (
        await asyncio.to_thread(engines, "big"),
        await asyncio.to_thread(engines, "chatty"),
    )
    await asyncio.to_thread(big.join, pad="y" * (MAX_NODE_DATA + 1))
    url = f"http://127.0.0.1:{huge_status}/netdiscovery/engine"
    await asyncio.to_thread(slow.join, status_url=url, port=huge_status)
    await eventually(lambda: len(monitor.watcher.members()) == 2, what="both nodes seen")
    await eventually(lambda: "chatty" in monitor.status.rates, what="the answer read")
    _, view, _ = await _get(f"{monitor.http.url}/netdiscovery/monitor")
    assert view["dropped"]["znode"] == 1
    engines_by_id = {e["id"]: e for e in view["engines"]}
    assert engines_by_id["big"]["garbage"] is True
    assert "y" * 100 not in json.dumps(view)  # the node's data was never decoded
    assert engines_by_id["chatty"]["status_error"] == "AnswerTooLarge"
    _, text, _ = await _get(f"{monitor.http.url}/metrics")
    counted = _dropped(text)
    assert counted["znode"] == 1
    assert counted["status"] >= 1
