"""Fixtures for the distributed-crawl tests: a generated site, a real Redis server."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from netdisco.testing import RedisServer, write_site
from tests.netdisco.engine_site import start_site
from tests.netdisco.redis_support import SiteServer

PAGES = 2000


@pytest.fixture(scope="module")
def site_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    return write_site(out, PAGES)


@pytest.fixture(scope="module")
def redis_server() -> Iterator[RedisServer]:
    server = RedisServer()
    server.start()
    yield server
    server.close()


@pytest.fixture
def redis_url(redis_server: RedisServer) -> str:
    return f"{redis_server.url}?prefix=d{uuid.uuid4().hex[:10]}"


@pytest.fixture
async def counting_site(site_dir: Path) -> AsyncIterator[SiteServer]:
    server = SiteServer(site_dir, delay=0.002)
    await server.start()
    yield server
    await server.stop()


@pytest.fixture
async def site() -> AsyncIterator[str]:
    """The engine tests' site (modules that serve a site of their own override this)."""
    runner, base = await start_site()
    yield base
    await runner.cleanup()
