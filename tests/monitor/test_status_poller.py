"""The status poller survives whatever an engine answers (a real server on loopback)."""

from __future__ import annotations

from typing import Any

import pytest
from aiohttp import web

from monitor.status import StatusPoller
from netdisco.cluster.contract import ENGINE_HEADER
from netdisco.cluster.membership import Member
from netdisco.testing import eventually, serve

GARBAGE: list[Any] = [
    [1, "x", None],
    {"spiders": ["a", {"pages_per_second": 1}]},
    [{"pages_per_second": [1]}],
    [{"pages_per_second": "fast"}],
    "just a string",
    None,
]


@pytest.mark.parametrize("garbage", GARBAGE, ids=[repr(g)[:20] for g in GARBAGE])
async def test_a_malformed_spider_list_does_not_kill_the_poller(garbage: Any) -> None:
    answers = [garbage]

    async def spiders(request: web.Request) -> web.Response:
        return web.json_response(answers[-1], headers={ENGINE_HEADER: "e1"})

    app = web.Application()
    app.router.add_get("/netdiscovery/spiders", spiders)
    async with serve(app) as base:
        member = Member(
            name="e1", czxid=1, session=1, data={"status_url": f"{base}/netdiscovery/engine"}
        )
        poller = StatusPoller(lambda: [member], interval=0.02, timeout=2.0)
        poller.start()
        try:
            await eventually(lambda: "e1" in poller.rates, "a first poll")
            assert poller.rates["e1"].pages_per_second is None
            assert poller.rates["e1"].error is not None
            answers.append([{"pages_per_second": 2.5}, {"pages_per_second": 1}])
            await eventually(lambda: poller.rates["e1"].pages_per_second == 3.5, "recovery")
            assert poller._task is not None
            assert not poller._task.done()
        finally:
            await poller.close()
