"""The engine as a service: spiders started and deleted over HTTP, schedules, run claims."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import AsyncIterator
from functools import partial
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from redis import asyncio as aioredis

from netdisco.cluster.contract import parse_payload
from netdisco.crawl.settings import Settings
from netdisco.engine import SpiderEngine, load_config
from netdisco.engine.config import EngineSettings
from netdisco.engine.schedules import Schedule, parse_schedule
from netdisco.exceptions import ConfigError
from netdisco.testing import RedisServer, eventually

from .engine_site import FakeRegistry, SiteSpider
from .service.spiders import SITE_ENV

TOKEN = "tok-service-0123456789"
ALLOWED = ("tests.netdisco.service",)
TREE = "tests.netdisco.service.spiders:Tree"
QUIET = Settings(progress_interval=0)


@pytest.fixture
async def engine(site: str, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[SpiderEngine]:
    monkeypatch.setenv(SITE_ENV, site)
    settings = EngineSettings(id="svc", port=0, token=TOKEN, spider_modules=ALLOWED)
    engine = SpiderEngine(settings)
    await engine.start()
    yield engine
    await engine.stop(deadline=1)


async def call(engine: SpiderEngine, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    headers = {"Authorization": f"Bearer {TOKEN}"}
    url = f"http://127.0.0.1:{engine.port}/netdiscovery{path}"
    async with (
        aiohttp.ClientSession() as session,
        session.request(method, url, json=body, headers=headers) as response,
    ):
        assert response.status != 500, await response.text()
        return response.status, await response.json()


async def test_a_spider_started_over_http_crawls_and_can_be_deleted(engine: SpiderEngine) -> None:
    status, body = await call(
        engine, "POST", "/spiders", {"spider": "tests.netdisco.service.spiders:Tree"}
    )
    assert status == 201, body
    assert body["name"] == "tree"
    await eventually(lambda: engine.crawler("tree").state == "finished", what="tree finished")
    status, body = await call(engine, "GET", "/spiders/tree")
    assert (status, body["succeeded"]) == (200, 200)
    assert [c["name"] for c in engine.describe().to_dict()["spiders"]] == ["tree"]
    status, body = await call(engine, "DELETE", "/spiders/tree")
    assert (status, body) == (200, {"name": "tree", "deleted": True})
    status, body = await call(engine, "GET", "/spiders/tree")
    assert (status, body["error"]["code"]) == (404, "unknown_spider")
    assert engine.describe().spiders == ()


async def test_a_name_and_settings_from_the_body(engine: SpiderEngine) -> None:
    body = {
        "spider": "tests.netdisco.service.spiders:Tree",
        "name": "capped",
        "settings": {"max_pages": 5, "progress_interval": 0},
    }
    status, answer = await call(engine, "POST", "/spiders", body)
    assert (status, answer["name"]) == (201, "capped")
    await eventually(lambda: engine.crawler("capped").state == "finished", what="capped finished")
    assert engine.crawler("capped").stats.succeeded == 5
    assert engine.crawler("capped").spider.name == "capped"


async def test_a_running_spider_is_a_conflict_and_cannot_be_deleted(engine: SpiderEngine) -> None:
    body = {"spider": "tests.netdisco.service.spiders:SlowTree", "settings": {"concurrency": 1}}
    assert (await call(engine, "POST", "/spiders", body))[0] == 201
    status, answer = await call(engine, "POST", "/spiders", body)
    assert (status, answer["error"]["code"]) == (409, "spider_exists")
    status, answer = await call(engine, "DELETE", "/spiders/slowtree")
    assert (status, answer["error"]["code"]) == (409, "invalid_transition")
    await call(engine, "POST", "/spiders/slowtree/stop")
    assert (await call(engine, "DELETE", "/spiders/slowtree"))[0] == 200


@pytest.mark.parametrize(
    ("body", "code", "key"),
    [
        ({"spider": "json:JSONDecoder"}, "spider_not_allowed", None),
        ({"spider": "tests.netdisco.serviceX.spiders:Tree"}, "spider_not_allowed", None),
        ({"spider": "tests/netdisco/service/spiders.py:Tree"}, "spider_not_allowed", None),
        ({"spider": "tests.netdisco.service.broken:Any"}, "spider_not_loadable", None),
        ({"spider": "tests.netdisco.service.spiders:Missing"}, "spider_not_loadable", None),
        ({"spider": "tests.netdisco.service.spiders:SITE_ENV"}, "spider_not_loadable", None),
        ({"spider": "tests.netdisco.service.spiders:Tree", "settings": {"concurrency": 0}},
         "invalid_value", "settings.concurrency"),
        ({"spider": "tests.netdisco.service.spiders:Tree", "settings": {"nope": 1}},
         "invalid_value", "settings.nope"),
        ({"spider": "tests.netdisco.service.spiders:Tree", "schedule": "61 * * * *"},
         "invalid_value", "schedule"),
        ({"spider": TREE, "every": "0s"}, "invalid_value", "every"),
        ({"spider": TREE, "every": -5}, "invalid_value", "every"),
        ({"spider": TREE, "name": "a/b"}, "invalid_value", "name"),
        ({"spider": "tests.netdisco.service.spiders:Tree", "extra": 1}, "invalid_value", "extra"),
        ({"spider": 3}, "invalid_value", "spider"),
        (["not", "an", "object"], "invalid_value", "body"),
    ],
)  # fmt: skip
async def test_bad_requests_start_nothing(
    engine: SpiderEngine, body: Any, code: str, key: str | None
) -> None:
    status, answer = await call(engine, "POST", "/spiders", body)
    assert (status, answer["error"]["code"]) == (400, code), answer
    assert answer["error"].get("key") == key
    assert engine.crawlers() == []


async def test_starting_needs_the_token(engine: SpiderEngine) -> None:
    url = f"http://127.0.0.1:{engine.port}/netdiscovery/spiders"
    body = {"spider": "tests.netdisco.service.spiders:Tree"}
    async with aiohttp.ClientSession() as session:
        async with session.post(url, json=body) as response:
            assert response.status == 401
        async with session.post(url, json=body, headers={"Authorization": "Bearer x"}) as r:
            assert r.status == 403
        async with session.delete(url + "/tree") as response:
            assert response.status == 401
    assert engine.crawlers() == []


async def test_without_an_allow_list_nothing_starts_over_http(site: str) -> None:
    async with SpiderEngine(EngineSettings(id="closed", port=0)) as engine:
        await engine.start()
        status, answer = await call(
            engine, "POST", "/spiders", {"spider": "tests.netdisco.service.spiders:Tree"}
        )
        assert (status, answer["error"]["code"]) == (400, "spider_not_allowed")
        assert "spider_modules" in answer["error"]["message"]


# -- schedules -----------------------------------------------------------------------------


def test_cron_and_every_schedules() -> None:
    midnight = 1767225600.0  # 2026-01-01 00:00:00 UTC
    six_hourly = Schedule(cron="0 */6 * * *")
    assert six_hourly.next_run(midnight) == midnight + 6 * 3600
    assert six_hourly.next_run(midnight + 1) == midnight + 6 * 3600
    with_seconds = Schedule(cron="* * * * * 30")  # a sixth field: seconds
    assert with_seconds.next_run(midnight) == midnight + 30
    every = parse_schedule(None, "1.5h", key="s")
    assert every == Schedule(every=5400.0)
    assert every.next_run(midnight) == midnight + 5400  # multiples of the interval since 1970
    assert every.next_run(midnight + 1) == midnight + 5400
    assert every.next_run(midnight - 1) == midnight
    assert parse_schedule(None, None, key="s") is None
    for cron, every_value, key in [
        ("nonsense", None, "s.schedule"),
        ("* * *", None, "s.schedule"),
        (None, "0", "s.every"),
        (None, "soon", "s.every"),
        (None, True, "s.every"),
        ("* * * * *", "1m", "s.every"),
    ]:
        with pytest.raises(ConfigError) as caught:
            parse_schedule(cron, every_value, key="s")
        assert caught.value.key == key


async def test_every_runs_again_and_skips_while_a_run_is_going(site: str) -> None:
    registries: list[FakeRegistry] = []

    def registry(engine_id: str, describe: Any) -> FakeRegistry:
        registries.append(FakeRegistry(engine_id, describe, []))
        return registries[-1]

    engine = SpiderEngine(EngineSettings(id="sched", port=0), registry_factory=registry)
    fast = SiteSpider(name="fast", start_urls=[f"{site}/fast/p/0"])
    slow = SiteSpider(name="slow", start_urls=[f"{site}/slow/p/0"])
    engine.add_spider(fast, QUIET, schedule=Schedule(every=0.3))
    slow_settings = Settings(progress_interval=0, concurrency=1)
    engine.add_spider(slow, slow_settings, schedule=Schedule(every=0.2))
    began = time.time()
    await engine.start()
    waiting = asyncio.create_task(engine.wait())
    try:
        await eventually(lambda: engine.spider_status("fast")["runs"] >= 3, what="three runs")
        await eventually(lambda: engine.spider_status("slow")["skipped_runs"] >= 2, what="skips")
        status = engine.spider_status("fast")
        assert status["every"] == 0.3
        # each tick after the first: the next run moved on with every run, past a third
        # tick after the start (ticks 0.3 s apart; decided, not timed against our clock)
        assert status["next_run"] > began + 0.8
        assert engine.spider_status("slow")["runs"] == 1  # still its first run
        node = parse_payload(registries[0].describe().to_json())
        assert {s.name: s.next_run is not None for s in node.spiders} == {
            "fast": True,
            "slow": True,
        }
        assert not waiting.done()  # a scheduled engine is never done between runs
    finally:
        await engine.stop(deadline=0.5)
        await waiting


def _ran_twice(engine: SpiderEngine) -> bool:
    return bool(engine.spider_status("fast")["runs"] >= 2)


async def test_a_stop_ends_the_ticks_before_it_stops_the_spiders(site: str) -> None:
    """A tick that fired while an engine stopped its spiders started a run nobody
    stopped: the engine's stop waited for it for ever. Ticks 20 ms apart, so that stops
    land beside ticks; every stop ends, with its spider ended."""
    for attempt in range(3):
        engine = SpiderEngine(EngineSettings(id=f"ticks-{attempt}", port=0))
        spider = SiteSpider(name="fast", start_urls=[f"{site}/fast/p/0"])
        engine.add_spider(spider, QUIET, schedule=Schedule(every=0.02))
        await engine.start()
        await eventually(partial(_ran_twice, engine), what="two runs")
        await asyncio.wait_for(engine.stop(deadline=0.5), 30)
        # a tick that fired during the stop would have left a run going past it
        assert engine.spider_status("fast")["state"] in ("finished", "stopped")


def test_engine_file_schedules(tmp_path: Path) -> None:
    path = tmp_path / "engine.toml"
    path.write_text(
        '[[spiders]]\nspider = "tests.netdisco.service.spiders:Tree"\nschedule = "*/5 * * * *"\n'
        '[[spiders]]\nspider = "tests.netdisco.service.spiders:SlowTree"\nevery = "2h"\n'
    )
    config = load_config(path, environ={})
    assert [s.schedule for s in config.spiders] == [
        Schedule(cron="*/5 * * * *"),
        Schedule(every=7200.0),
    ]
    path.write_text('[[spiders]]\nspider = "m:C"\nschedule = "every day"\n')
    with pytest.raises(ConfigError) as caught:
        load_config(path, environ={})
    assert caught.value.key == "spiders[0].schedule"


async def test_a_shared_crawl_runs_each_tick_once_across_engines(site: str) -> None:
    """Two engines on one Redis frontier, one schedule: every tick is run by one of them."""
    with RedisServer() as redis:
        prefix = f"t{time.time_ns()}"
        settings = Settings(progress_interval=0, frontier=f"{redis.url}?prefix={prefix}")
        engines = [SpiderEngine(EngineSettings(id=f"e{i}", port=0, http=False)) for i in range(2)]
        for engine in engines:
            spider = SiteSpider(name="shared", start_urls=[f"{site}/fast/p/0"])
            engine.add_spider(spider, settings, schedule=Schedule(every=0.5))
            await engine.start()
        try:

            def counts() -> list[dict[str, Any]]:
                return [e.spider_status("shared") for e in engines]

            await eventually(
                lambda: sum(c["runs"] for c in counts()) >= 4, what="four runs", timeout=150
            )
            # freeze the counters together: one engine stopping while the other still ticks
            # (a loaded machine) would run ticks that nobody else looks at
            await asyncio.gather(*(engine.stop(deadline=0.5) for engine in engines))
            runs = [c["runs"] + c["skipped_runs"] + c["failed_runs"] for c in counts()]
            elsewhere = [c["runs_elsewhere"] for c in counts()]
            # each tick is claimed once, in Redis, and the claims are the engines' runs:
            # no tick claimed twice under two names (they are 0.5 s apart). An
            # engine busy starting a run looks at no tick meanwhile (a loaded machine), so
            # the other's runs are not each matched by a tick found taken here
            async with aioredis.Redis.from_url(redis.url) as client:
                keys = [k.decode() async for k in client.scan_iter(match=f"{prefix}:*:run:*")]
            ticks = sorted(int(key.rpartition(":")[2]) for key in keys)
            assert runs[0] + runs[1] >= 4
            # a stop may cancel a tick between its claim and its count, in each engine
            assert 0 <= len(ticks) - (runs[0] + runs[1]) <= 2
            assert all(b - a >= 400 for a, b in itertools.pairwise(ticks)), ticks
            assert elsewhere[0] + elsewhere[1] >= 2  # both looked, and found ticks taken
        finally:
            for engine in engines:
                await engine.stop(deadline=0.5)
