"""The README's cluster quick start, run again: the engines' spider says why it fetched
nothing and what to type (its status, over HTTP), and its feed, overwritten, holds the
README's answer after a fresh start instead of twice as many lines."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path
from typing import Any

import aiohttp

from netdisco.crawl.settings import from_mapping
from netdisco.engine import SpiderEngine
from netdisco.engine.config import EngineSettings
from tests.netdisco.sites import ROOT, Site, load_example, running_site


def _readme_spider_settings() -> dict[str, Any]:
    """``[spiders.settings]`` of the README's cluster-engine.toml, as written."""
    readme = (ROOT / "README.md").read_text("utf-8")
    block = re.search(r"^# cluster-engine\.toml\n(.*?)^```", readme, re.M | re.S)
    assert block, "the README's cluster-engine.toml"
    return dict(tomllib.loads(block.group(1))["spiders"][0]["settings"])


async def _run(site: Site, settings: dict[str, Any], out: Path) -> dict[str, Any]:
    """One engine, the README's spider settings (its frontier moved to ``settings``'),
    run to its end; its spider's status over HTTP."""
    catalogue = load_example("local_site").Catalogue
    spider = type("Catalogue", (catalogue,), {"start_urls": (site.url("/shop/"),)})
    async with SpiderEngine(EngineSettings(id="engine-1", port=0)) as engine:
        engine.add_spider(spider, from_mapping(settings))
        await engine.start()
        await engine.wait()
        url = f"http://127.0.0.1:{engine.port}/netdiscovery/spiders/catalogue"
        async with aiohttp.ClientSession() as http, http.get(url) as resp:
            return dict(await resp.json())


async def test_the_cluster_quick_start_run_again(redis_url: str, tmp_path: Path) -> None:
    settings = _readme_spider_settings()
    (feed,) = settings["feeds"]
    assert feed == "cluster-{engine}.jsonl"
    settings["frontier"] = redis_url
    settings["feeds"] = {str(tmp_path / feed): settings["feeds"][feed]}
    written = tmp_path / "cluster-engine-1.jsonl"
    async with running_site() as site:
        first = await _run(site, settings, tmp_path)
        assert (first["state"], "already_finished" in first) == ("finished", False)
        count = len(written.read_text().splitlines())
        assert count == 30
        again = await _run(site, settings, tmp_path)  # the same crawl: it had finished
        assert again["succeeded"] == 0
        assert "to crawl again" in again["already_finished"] or "delete its keys" in again[
            "already_finished"], again  # fmt: skip
        prefix = redis_url.partition("prefix=")[2]
        settings["frontier"] = redis_url.replace(prefix, prefix + "x")  # a fresh crawl
        await _run(site, settings, tmp_path)
    lines = written.read_text().splitlines()
    assert len(lines) == 30, "a fresh run's feed holds its own items, not the last run's too"
    assert len({json.loads(line)["url"] for line in lines}) == 30
