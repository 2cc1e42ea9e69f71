"""The engine token goes only where the registered engine is (issue 27, finding 6).

An anonymous ZooKeeper client advertises a fake engine whose ``status_url`` is a
loopback listener of the test; a pause through the monitor must not deliver the
engine token there.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import replace

import pytest
from aiohttp import web
from kazoo.client import KazooClient

from netdisco.cluster.contract import ENGINE_HEADER
from netdisco.testing import eventually, free_port
from tests.monitor.service_support import control_url, post, steering


class Listener:
    """A loopback HTTP server that records the headers of each request."""

    def __init__(self) -> None:
        self.port = free_port()
        self.seen: list[dict[str, str]] = []
        self.runner: web.AppRunner | None = None

    async def start(self) -> None:
        async def record(request: web.Request) -> web.Response:
            self.seen.append(dict(request.headers))
            # an engine answers as the one asked (the monitor checks ENGINE_HEADER)
            asked = request.headers.get(ENGINE_HEADER, "")
            return web.json_response({"ok": True}, headers={ENGINE_HEADER: asked})

        app = web.Application()
        app.router.add_post("/netdiscovery/spiders/{name}/{action}", record)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        await web.TCPSite(self.runner, "127.0.0.1", self.port).start()

    @property
    def status_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/netdiscovery/engine"


@pytest.fixture
async def listener() -> AsyncIterator[Listener]:
    server = Listener()
    await server.start()
    yield server
    assert server.runner is not None
    await server.runner.cleanup()


def _forge(zk_hosts: str, name: str, **payload: object) -> None:
    """What any anonymous client can do without a digest: advertise an engine."""
    client = KazooClient(hosts=zk_hosts)
    client.start(timeout=15)
    data = {"id": name, "state": "running", "contract": 2, **payload}
    client.create(f"/netdiscovery/{name}", json.dumps(data).encode(), makepath=True)
    client.stop()
    client.close()


async def test_a_forged_status_url_never_gets_the_engine_token(
    zk_hosts, start_monitor, listener
) -> None:
    config = steering(zk_hosts, token=None)
    assert config.control is not None
    control = replace(config.control, engine_hosts=("engine.example",))
    monitor, _ = await start_monitor(replace(config, control=control))
    url = listener.status_url
    forged = {
        "mismatch": {"host": "127.0.0.1", "port": 8715, "status_url": url},
        "foreign": {"host": "evil.invalid", "port": 80, "status_url": "http://evil.invalid/netdiscovery/engine"},
        "genuine": {"host": "127.0.0.1", "port": listener.port, "status_url": url},
    }  # fmt: skip
    for name, payload in forged.items():
        await asyncio.to_thread(_forge, zk_hosts, name, **payload)
    await eventually(lambda: len(monitor.watcher.members()) == 3, what="the nodes seen")
    for name in ("mismatch", "foreign"):
        status, body = await post(control_url(monitor.http.url, name, "quotes", "pause"))
        assert (status, body["error"]["code"]) == (502, "engine_untrusted"), body
        assert "not sent the token" in body["error"]["message"]
    assert listener.seen == []
    # the same listener as the node's registered host and port, but the node proves no
    # cluster member wrote it (anyone can write a znode without a digest): not sent
    status, body = await post(control_url(monitor.http.url, "genuine", "quotes", "pause"))
    assert (status, body["error"]["code"]) == (502, "engine_untrusted"), body
    assert "no valid proof" in body["error"]["message"]
    assert listener.seen == []


async def test_a_proven_engine_gets_the_token_a_copied_proof_does_not(
    zk_hosts, start_monitor, listener, engines
) -> None:
    """An engine of the cluster proves its node (its id, status_url and session under
    the engine token); a stranger's node that copies that proof is owned by another
    session, so the proof is worthless there."""
    monitor, _ = await start_monitor(steering(zk_hosts, token=None))
    engine = await asyncio.to_thread(engines, "real")
    url = listener.status_url
    await asyncio.to_thread(engine.join, host="127.0.0.1", port=listener.port, status_url=url)
    proof = json.loads(engine.data)["proof"]
    await asyncio.to_thread(
        _forge, zk_hosts, "copy", host="127.0.0.1", port=listener.port, status_url=url,
        proof=proof, contract=3,
    )  # fmt: skip
    await eventually(lambda: len(monitor.watcher.members()) == 2, what="the nodes seen")
    status, body = await post(control_url(monitor.http.url, "copy", "quotes", "pause"))
    assert (status, body["error"]["code"]) == (502, "engine_untrusted"), body
    assert listener.seen == []
    status, _ = await post(control_url(monitor.http.url, "real", "quotes", "pause"))
    assert status == 200
    assert [h.get("Authorization") for h in listener.seen] == ["Bearer engine-tok-0123456789"]
