"""Credentials stay with their origin: a redirect to another scheme, host or port drops
``Authorization``, ``Cookie`` and ``Proxy-Authorization`` (two real servers on loopback)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack

import pytest
from aiohttp import web

from netdisco import Request, Spider
from netdisco.testing import serve
from tests.netdisco.sites import crawl

SECRETS = {"Authorization": "Bearer s3cret", "Cookie": "session=abc", "Proxy-Authorization": "x"}
SENT = {name.lower() for name in SECRETS}


class Recorder:
    """A server that records the credential headers each path arrived with."""

    def __init__(self) -> None:
        self.seen: dict[str, set[str]] = {}
        self.base = ""

    async def handle(self, request: web.Request) -> web.Response:
        self.seen[request.path] = {k.lower() for k in request.headers if k.lower() in SENT}
        target = request.query.get("to")
        if target is not None:
            return web.Response(status=302, headers={"Location": target})
        return web.Response(text="<h1>end</h1>", content_type="text/html")

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/{tail:.*}", self.handle)
        return app


@pytest.fixture
async def servers() -> AsyncIterator[tuple[Recorder, Recorder]]:
    """Two origins: 127.0.0.1 and 127.0.0.2 (each on its own port)."""
    first, second = Recorder(), Recorder()
    async with AsyncExitStack() as stack:
        first.base = await stack.enter_async_context(serve(first.app(), "127.0.0.1"))
        second.base = await stack.enter_async_context(serve(second.app(), "127.0.0.2"))
        yield first, second


class WithCredentials(Spider):
    name = "credentials"

    def __init__(self, url: str) -> None:
        super().__init__()
        self.url = url

    async def start(self) -> AsyncIterator[Request]:
        yield Request(self.url, headers=dict(SECRETS), callback=self.parse)

    def parse(self, response: object) -> list[object]:
        return []


async def test_credentials_are_dropped_when_a_redirect_leaves_the_origin(
    servers: tuple[Recorder, Recorder],
) -> None:
    first, second = servers
    # same origin first (kept), then another host (dropped), then back home (still dropped)
    home = f"{first.base}/back"
    away = f"{second.base}/away?to={home}"
    start = f"{first.base}/start?to=/same%3Fto%3D{away.replace('?', '%3F').replace('=', '%3D')}"
    crawler, _ = await crawl(WithCredentials(start), obey_robots=False)
    assert crawler.stats.succeeded == 1, crawler.stats.last_error
    assert first.seen["/start"] == SENT
    assert first.seen["/same"] == SENT
    assert second.seen["/away"] == set()
    assert first.seen["/back"] == set()


async def test_another_port_on_the_same_host_is_another_origin(
    servers: tuple[Recorder, Recorder],
) -> None:
    first, _ = servers
    other = Recorder()
    async with serve(other.app()) as other_base:
        crawler, _ = await crawl(
            WithCredentials(f"{first.base}/start?to={other_base}/there"), obey_robots=False
        )
    assert crawler.stats.succeeded == 1, crawler.stats.last_error
    assert first.seen["/start"] == SENT
    assert other.seen["/there"] == set()
