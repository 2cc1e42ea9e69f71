"""The lowest releases pyproject.toml allows still work: import, a crawl, an engine.

``make test-lowest`` installs them (uv's ``--resolution lowest-direct``) into a venv of
their own and runs this file there. It is a smoke check, not the suite: the suite's own
tools (pytest plugins, mypy) have lower bounds of their own that need not meet.
Run from the checkout: ``.venv-lowest/bin/python tests/lowest_smoke.py``.
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
from pathlib import Path

import aiohttp
from aiohttp import web

# this file's own directory would shadow the package with tests/netdisco
sys.path[0] = str(Path(__file__).resolve().parents[1])

from examples.local_site import PAGES, Catalogue, make_app  # noqa: E402
from netdisco import Crawler, JsonLinesPipeline, Settings  # noqa: E402
from netdisco.engine import EngineSettings, SpiderEngine  # noqa: E402
from netdisco.testing import ZooKeeperServer, eventually, free_port, get_json  # noqa: E402


async def crawl(base: str, out: Path) -> None:
    """Every page of the catalogue, each item once."""
    spider = Catalogue(start_urls=[base])
    stats = await Crawler(spider, Settings(), pipelines=[JsonLinesPipeline(out)]).run()
    text = await asyncio.to_thread(out.read_text)
    items = [json.loads(line) for line in text.splitlines()]
    assert stats.succeeded == PAGES + 1, stats.as_dict()
    assert len({item["sku"] for item in items}) == PAGES == len(items), len(items)


async def engine(base: str, zk_hosts: str) -> None:
    """An engine registers in ZooKeeper, serves its status and runs a spider."""
    port = free_port()
    settings = EngineSettings(id="lowest", port=port)
    async with (
        SpiderEngine(settings, zookeeper={"hosts": zk_hosts}) as running,
        aiohttp.ClientSession() as session,
    ):
        running.add_spider(Catalogue(start_urls=[base]), Settings(max_pages=5))
        await running.start()
        url = f"http://127.0.0.1:{port}/netdiscovery/health"
        health = await eventually(lambda: get_json(session, url), "healthy", timeout=30)
        assert health["registry"] == "registered", health
        states = await running.run()
    assert {str(state) for state in states.values()} == {"finished"}, states


async def main() -> None:
    runner = web.AppRunner(make_app())
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    base = f"http://127.0.0.1:{port}/"
    try:
        with tempfile.TemporaryDirectory() as tmp:
            await crawl(base, Path(tmp) / "items.jsonl")
        with ZooKeeperServer() as zk:
            await engine(base, zk.hosts)
    finally:
        await runner.cleanup()
    print("lowest releases: import, crawl and engine ok")


if __name__ == "__main__":
    asyncio.run(main())
