"""Issue 16, item 3: runs. Scheduled re-runs revisit, a resume is not a new run, a shared
crawl's engines agree on the run, and the settings are refused where a user meets them.

Real parts: a loopback site that honours validators and counts at the server,
``netdisco crawl`` as a child process stopped with SIGTERM, engines with schedules,
a real Redis server.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families
from redis import asyncio as aioredis

from netdisco import CallablePipeline, Crawler
from netdisco.crawl.settings import from_mapping
from netdisco.engine import SpiderEngine, load_config
from netdisco.engine.config import EngineSettings
from netdisco.engine.schedules import Schedule
from netdisco.exceptions import ConfigError
from netdisco.frontiers.redis import RedisOptions
from netdisco.testing import eventually
from tests.netdisco.conftest import PAGES
from tests.netdisco.redis_support import gen_spider_source
from tests.netdisco.test_state_dir import ENV, crawl_argv, finish, start

from .recrawl_support import ConditionalSite, Links, page

QUIET = {"progress_interval": 0, "obey_robots": False, "retries": 0}
TOKEN = "tok-recrawl-0123456789"


async def serve(pages: dict[str, str], delay: float = 0.0) -> ConditionalSite:
    server = ConditionalSite(pages, delay=delay)
    await server.start()
    return server


@pytest.fixture
async def site() -> AsyncIterator[ConditionalSite]:
    server = await serve({"/": page("/a", "/b"), "/a": page("/c"), "/b": page(), "/c": page()})
    yield server
    await server.stop()


# -- schedules: every tick is a new run --------------------------------------------------


async def test_scheduled_runs_on_a_state_dir_revisit_every_page(
    site: ConditionalSite, tmp_path: Path
) -> None:
    """``recrawl = "always"``: each tick fetches the site again (the seen set is per run);
    ``"conditional"``: each tick revalidates it."""
    other = await serve(dict(site.pages))
    engine = SpiderEngine(EngineSettings(id="sched", port=0))
    plain = from_mapping({**QUIET, "state_dir": str(tmp_path / "plain")})
    cond = from_mapping({**QUIET, "state_dir": str(tmp_path / "cond"), "recrawl": "conditional"})
    engine.add_spider(Links(name="plain", start_urls=[f"{site.base}/"]), plain, schedule=EVERY)
    engine.add_spider(Links(name="cond", start_urls=[f"{other.base}/"]), cond, schedule=EVERY)
    await engine.start()
    try:
        await eventually(lambda: min(site.full.values(), default=0) >= 3, "three full runs")
        assert set(site.full) == {"/", "/a", "/b", "/c"}
        assert not site.conditional
        await eventually(lambda: min(other.not_modified.values(), default=0) >= 2, "revalidations")
        assert dict(other.full) == {"/": 1, "/a": 1, "/b": 1, "/c": 1}  # only the first run's
        assert engine.spider_status("cond")["runs"] >= 3

        async def exported() -> bool:
            url = f"http://127.0.0.1:{engine.port}/metrics"
            async with aiohttp.ClientSession() as session, session.get(url) as response:
                text = await response.text()
            (family,) = [f for f in text_string_to_metric_families(text) if f.name == REQUESTS]
            counts = {(s.labels["spider"], s.labels["outcome"]): s.value for s in family.samples}
            return counts[("cond", "not_modified")] == 4  # a whole run's: every page unchanged

        await eventually(exported, "not_modified in the metrics", timeout=30)
    finally:
        await engine.stop(deadline=1)
        await other.stop()


EVERY = Schedule(every=0.5)
REQUESTS = "netdisco_requests"


# -- a resume is not a new run -------------------------------------------------------------


@pytest.mark.slow
async def test_a_run_stopped_by_sigterm_resumes_and_fetches_nothing_twice(
    tmp_path: Path, site_dir: Path
) -> None:
    server = ConditionalSite(delay=0.002)
    server.load(site_dir)
    await server.start()
    try:
        spider = tmp_path / "gen_spider.py"
        spider.write_text(gen_spider_source(server.base))
        state, log = tmp_path / "state", tmp_path / "crawl.log"
        argv = crawl_argv(f"{spider}:Gen", state, "-s", "recrawl=conditional")
        assert await finish(start(argv, log)) == 0, log.read_text()[-3000:]
        assert sum(server.full.values()) == PAGES
        server.reset_counts()
        second = start(argv, log)
        try:
            await eventually(lambda: len(server.requests) >= PAGES // 4, "a quarter revalidated")
            second.send_signal(signal.SIGTERM)
            assert await finish(second, 60) == 128 + signal.SIGTERM  # stopped, not finished
        finally:
            if second.poll() is None:
                second.kill()
        assert len(server.requests) < PAGES, "the run ended before the stop"
        assert await finish(start(argv, log)) == 0, log.read_text()[-3000:]
        assert len(server.requests) == PAGES  # the resumed run reached every page
        assert max(server.requests.values()) == 1  # none twice across the stop
        assert sum(server.not_modified.values()) == PAGES  # all revalidated, none refetched
        assert "run_begun" in log.read_text()
    finally:
        await server.stop()


# -- a shared crawl: the run is the tick's, the same on every engine ---------------------


async def shared_run(spider: Links, url: str, run: str, items: list[Any] | None = None) -> Crawler:
    settings = from_mapping({**QUIET, "frontier": url, "recrawl": "conditional"})
    crawler = Crawler(
        spider, settings, pipelines=[CallablePipeline(([] if items is None else items).append)]
    )
    crawler.run_id = run
    await crawler.run()
    assert crawler.state == "finished", crawler.stats.last_error
    return crawler


async def test_a_shared_crawl_revalidates_at_each_new_run(
    site: ConditionalSite, redis_url: str
) -> None:
    await shared_run(Links(start_urls=[f"{site.base}/"]), redis_url, "tick-1")
    assert sum(site.full.values()) == 4
    site.set("/c", page("/new"))
    site.set("/new", page())
    site.reset_counts()
    items: list[Any] = []
    second = await shared_run(Links(start_urls=[f"{site.base}/"]), redis_url, "tick-2", items)
    assert dict(site.not_modified) == {"/": 1, "/a": 1, "/b": 1}
    assert dict(site.full) == {"/c": 1, "/new": 1}
    assert sorted(i["url"].removeprefix(site.base) for i in items) == ["/c", "/new"]
    assert second.stats.not_modified == 3
    options = RedisOptions.from_url(redis_url)
    redis = aioredis.Redis.from_url(options.url)
    try:  # the keys docs/redis.md names, under the crawl's hash tag
        assert await redis.hlen(f"{options.prefix}:{{links}}:pages") == 5
        assert await redis.get(f"{options.prefix}:{{links}}:run") == b"tick-2"
    finally:
        await redis.aclose()
    site.reset_counts()
    joined = await shared_run(Links(start_urls=[f"{site.base}/"]), redis_url, "tick-2")
    assert not site.requests  # the same run, begun already by another engine: joined
    assert joined.stats.filtered >= 1


async def test_a_scheduled_shared_crawl_revalidates(site: ConditionalSite, redis_url: str) -> None:
    engine = SpiderEngine(EngineSettings(id="shared", port=0, http=False))
    settings = from_mapping({**QUIET, "frontier": redis_url, "recrawl": "conditional"})
    engine.add_spider(Links(start_urls=[f"{site.base}/"]), settings, schedule=EVERY)
    await engine.start()
    try:
        await eventually(lambda: min(site.not_modified.values(), default=0) >= 2, "revalidations")
        assert dict(site.full) == {"/": 1, "/a": 1, "/b": 1, "/c": 1}
    finally:
        await engine.stop(deadline=1)


# -- where users meet the settings ---------------------------------------------------------


def test_the_command_line_refuses_recrawl_without_a_store(tmp_path: Path) -> None:
    spider = Path(__file__).with_name("recrawl_support.py")
    for pair, key in (("recrawl=conditional", "recrawl"), ("age=1d", "age")):
        argv = [sys.executable, "-m", "netdisco.cli", "crawl", f"{spider}:Links", "-s", pair]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=ENV)
        assert done.returncode == 2, done.stderr
        assert f"netdisco: error: {key}: needs a state_dir or a Redis frontier" in done.stderr
    argv = [sys.executable, "-m", "netdisco.cli", "crawl", f"{spider}:Links", "-s", "age=0"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=ENV)
    assert (done.returncode, "age: must be a positive duration" in done.stderr) == (2, True)


def test_the_engine_file_refuses_recrawl_without_a_store(tmp_path: Path) -> None:
    path = tmp_path / "engine.toml"
    spider = 'spider = "tests.netdisco.recrawl_support:Links"'
    path.write_text(f'[[spiders]]\n{spider}\n[spiders.settings]\nrecrawl = "conditional"\n')
    with pytest.raises(ConfigError) as caught:
        load_config(path, environ={})
    assert caught.value.key == "spiders[0].settings.recrawl"
    path.write_text(f'[[spiders]]\n{spider}\n[spiders.settings]\nage = "-1d"\n')
    with pytest.raises(ConfigError) as caught:
        load_config(path, environ={})
    assert caught.value.key == "spiders[0].settings.age"
    path.write_text(
        f'[[spiders]]\n{spider}\nevery = "1h"\n[spiders.settings]\nage = "1d"\n'
        f'recrawl = "conditional"\nstate_dir = "{tmp_path / "s"}"\n'
    )
    (entry,) = load_config(path, environ={}).spiders
    assert entry.settings().age == 86400.0


async def test_posted_settings_are_checked(tmp_path: Path) -> None:
    settings = EngineSettings(
        id="post", port=0, token=TOKEN, spider_modules=("tests.netdisco.recrawl_support",)
    )
    async with SpiderEngine(settings) as engine:
        await engine.start()

        async def post(table: dict[str, Any]) -> tuple[int, Any]:
            body = {"spider": "tests.netdisco.recrawl_support:Links", "settings": table}
            url = f"http://127.0.0.1:{engine.port}/netdiscovery/spiders"
            headers = {"Authorization": f"Bearer {TOKEN}"}
            async with (
                aiohttp.ClientSession() as session,
                session.post(url, json=body, headers=headers) as response,
            ):
                return response.status, await response.json()

        for table, key in [
            ({"recrawl": "conditional"}, "settings.recrawl"),
            ({"recrawl": "never"}, "settings.recrawl"),
            ({"age": "0s"}, "settings.age"),
            # the store is the deployment's: a body may not name one (docs/security.md)
            ({"recrawl": "conditional", "state_dir": str(tmp_path)}, "settings.state_dir"),
        ]:
            status, answer = await post(table)
            assert (status, answer["error"]["key"]) == (400, key), answer
        assert engine.crawlers() == []
