"""Metrics users expect: download latency, responses by status code, next scheduled run.

The exposition of a real engine is read back with prometheus_client's parser and
checked by ``promtool check metrics`` (Debian's ``prometheus`` package).
"""

from __future__ import annotations

import asyncio

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from netdisco.crawl.settings import Settings
from netdisco.crawl.stats import LATENCY_BUCKETS, Latency, Stats
from netdisco.engine import SpiderEngine
from netdisco.engine.config import EngineSettings
from netdisco.engine.schedules import Schedule
from netdisco.testing import eventually
from tests.prom_support import needs_promtool, promtool_check

from .engine_site import SiteSpider


def test_latency_buckets_are_cumulative_at_read_time() -> None:
    latency = Latency()
    for seconds in (0.001, 0.005, 0.007, 0.3, 99.0):
        latency.observe(seconds)
    pairs = dict(latency.cumulative())
    assert list(pairs) == [*map(str, LATENCY_BUCKETS), "+Inf"]
    assert (pairs["0.005"], pairs["0.01"], pairs["0.25"], pairs["0.5"]) == (2, 3, 3, 4)
    assert (pairs["30.0"], pairs["+Inf"]) == (4, 5)
    assert latency.total == pytest.approx(99.313)


def test_responses_are_counted_by_status() -> None:
    stats = Stats()
    for status in (200, 200, 404, 503):
        stats.responded(status, 0.02)
    assert stats.statuses == {200: 2, 404: 1, 503: 1}
    assert dict(stats.latency.cumulative())["+Inf"] == 4


async def _metrics(engine: SpiderEngine) -> str:
    url = f"http://127.0.0.1:{engine.port}/metrics"
    async with aiohttp.ClientSession() as session, session.get(url) as response:
        assert response.status == 200
        return await response.text()


async def test_engine_metrics_have_latency_status_codes_and_next_run(site: str) -> None:
    quiet = Settings(progress_interval=0, retries=0)
    crawl = SiteSpider(name="site", start_urls=[f"{site}/fast/p/0", f"{site}/fast/p/999"])
    async with SpiderEngine(EngineSettings(id="m1", port=0)) as engine:
        engine.add_spider(crawl, quiet)
        engine.add_spider(SiteSpider(name="later", start_urls=[f"{site}/fast/p/1"]), quiet,
                          schedule=Schedule(every=3600.0))  # fmt: skip
        await engine.start()
        await eventually(lambda: engine.crawler("site").state == "finished", what="site crawl")
        text = await _metrics(engine)
        next_run = engine.spider_status("later")["next_run"]
    families = {f.name: f for f in text_string_to_metric_families(text)}
    responses = families["netdisco_responses"].samples
    codes = {(s.labels["spider"], s.labels["code"]): s.value for s in responses}
    assert codes[("site", "200")] == 200.0  # the whole tree
    assert codes[("site", "404")] == 1.0
    histogram = families["netdisco_download_duration_seconds"]
    assert histogram.type == "histogram"
    counts = {s.labels["spider"]: s.value for s in histogram.samples if s.name.endswith("_count")}
    assert counts["site"] == 201.0  # every response has its duration
    infinite = [s for s in histogram.samples if s.labels.get("le") == "+Inf"]
    assert {s.labels["spider"]: s.value for s in infinite}["site"] == 201.0
    (sample,) = families["netdisco_schedule_next_run_timestamp_seconds"].samples
    assert sample.labels == {"spider": "later"}
    assert sample.value == next_run
    assert isinstance(next_run, float)
    assert next_run % 3600 == 0


@needs_promtool
async def test_promtool_accepts_the_engine_exposition(site: str) -> None:
    async with SpiderEngine(EngineSettings(id="m2", port=0)) as engine:
        engine.add_spider(SiteSpider(name="site", start_urls=[f"{site}/fast/p/0"]),
                          Settings(progress_interval=0), schedule=Schedule(every=60.0))  # fmt: skip
        await engine.start()
        await eventually(lambda: engine.spider_status("site")["next_run"] is not None)
        text = await _metrics(engine)
    assert "netdisco_schedule_next_run_timestamp_seconds" in text
    assert await asyncio.to_thread(promtool_check, text) == (0, "")


@needs_promtool
def test_promtool_rejects_a_broken_exposition() -> None:
    """The check above can fail: promtool does complain."""
    code, complaint = promtool_check("# TYPE x_total counter\nx_total{ 1\n")
    assert code != 0
    assert complaint
