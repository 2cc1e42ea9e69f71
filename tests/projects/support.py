"""A small spider project on disk, and a kazoo client started on the test's loop."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from kazoo.client import KazooClient

from netdisco.cluster.zk import close_client

SPIDER = """from netdisco import Spider


class Docs(Spider):
    name = "docs"
    start_urls = ["http://127.0.0.1:1/"]

    async def parse(self, response):
        yield {"url": response.url}
"""


def write_project(directory: Path, module: str = "docsproj", extra: str = "") -> Path:
    """A directory project: a package with one spider and a pyproject.toml."""
    package = directory / module
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("VALUE = 42\n")
    (package / "spiders.py").write_text(SPIDER + extra)
    (directory / "pyproject.toml").write_text(
        f'[project]\nname = "{module}"\nversion = "1.0"\ndependencies = []\n'
    )
    return directory


@asynccontextmanager
async def kazoo(hosts: str) -> AsyncIterator[KazooClient]:
    """A started kazoo client, closed (in a thread) at the end."""
    client = KazooClient(hosts=hosts)
    await asyncio.to_thread(client.start, 15)
    try:
        yield client
    finally:
        await asyncio.to_thread(close_client, client)
