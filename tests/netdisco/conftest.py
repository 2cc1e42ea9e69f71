"""Fixtures for the distributed-crawl tests: a generated site, a real Redis server."""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from netdisco.testing import RedisServer
from tests.netdisco.redis_support import GEN_SITE, SiteServer

PAGES = 2000


@pytest.fixture(scope="module")
def site_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    command = [sys.executable, str(GEN_SITE), "--out", str(out), "--pages", str(PAGES)]
    subprocess.run(command, check=True, capture_output=True)
    return out


@pytest.fixture(scope="module")
def redis_server() -> Iterator[RedisServer]:
    server = RedisServer()
    server.start()
    yield server
    server.stop()


@pytest.fixture
def redis_url(redis_server: RedisServer) -> str:
    return f"{redis_server.url}?prefix=d{uuid.uuid4().hex[:10]}"


@pytest.fixture
async def site(site_dir: Path) -> AsyncIterator[SiteServer]:
    server = SiteServer(site_dir, delay=0.002)
    await server.start()
    yield server
    await server.stop()
