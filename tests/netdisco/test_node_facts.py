"""Node facts in the engine's status (and so its znode): real values, right types."""

from __future__ import annotations

from pathlib import Path

import aiohttp

from netdisco.crawl.settings import Settings
from netdisco.engine import SpiderEngine
from netdisco.engine.config import EngineSettings
from netdisco.testing import eventually

from .engine_site import site_spider


async def test_the_engine_reports_its_node_facts(site: str, tmp_path: Path) -> None:
    feeds, state = tmp_path / "feeds", tmp_path / "state"
    feeds.mkdir()
    state.mkdir()
    settings = EngineSettings(id="facts", port=0, feeds_dir=str(feeds))
    async with SpiderEngine(settings) as engine:
        engine.add_spider(
            site_spider("one", site, "slow"), Settings(progress_interval=0, state_dir=str(state))
        )
        await engine.start()
        await eventually(lambda: engine.facts.current, "a first reading")
        url = f"http://127.0.0.1:{engine.port}/netdiscovery/engine"
        async with aiohttp.ClientSession() as http, http.get(url) as response:
            facts = (await response.json())["facts"]
    assert {"cpu_percent", "load1", "memory_total", "memory_available", "rss", "open_fds"} <= set(
        facts
    )
    assert 0 < facts["memory_available"] <= facts["memory_total"]
    assert facts["rss"] > 0
    assert facts["open_fds"] > 0
    assert set(facts["disk_free"]) == {"feeds", "state"}
    assert all(free > 0 for free in facts["disk_free"].values())
    assert facts["netdisco"]
    assert facts["python"].count(".") == 2
