"""SpiderEngine embedded in the test's own loop: lifecycle, registry wiring, config."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from netdisco.crawl.crawler import SpiderState
from netdisco.crawl.settings import Settings
from netdisco.engine import EngineState, SpiderEngine
from netdisco.engine.config import EngineSettings, engine_settings, is_loopback, load_config
from netdisco.exceptions import ConfigError, DuplicateSpider, InvalidTransition, UnknownSpider
from netdisco.testing import eventually

from .engine_site import FakeRegistry, site_spider

QUIET = Settings(progress_interval=0, concurrency=4)
ONE_AT_A_TIME = Settings(progress_interval=0, concurrency=1)  # ~10 s on the slow pages


def standalone(**kwargs: Any) -> EngineSettings:
    return EngineSettings(http=False, **kwargs)


async def test_run_crawls_every_spider_to_the_end(site: str) -> None:
    async with SpiderEngine(standalone()) as engine:
        engine.add_spider(site_spider("a", site), QUIET)
        engine.add_spider(site_spider("b", site), QUIET)
        states = await engine.run()
    assert states == {"a": SpiderState.FINISHED, "b": SpiderState.FINISHED}
    assert [c.stats.items for c in engine.crawlers()] == [200, 200]
    assert engine.state is EngineState.STOPPED


async def test_spider_added_while_running_starts_at_once(site: str) -> None:
    async with SpiderEngine(standalone()) as engine:
        engine.add_spider(site_spider("slow", site, "slow"), ONE_AT_A_TIME)
        await engine.start()
        assert engine.pause("slow") is SpiderState.PAUSED
        late = engine.add_spider(site_spider("late", site), QUIET)
        await eventually(lambda: late.state is SpiderState.FINISHED)
        assert late.stats.items == 200
        assert await engine.stop_spider("slow") is SpiderState.STOPPED
        assert await engine.wait() == {"slow": SpiderState.STOPPED, "late": SpiderState.FINISHED}


async def test_lifecycle_controls_and_their_errors(site: str) -> None:
    async with SpiderEngine(standalone()) as engine:
        engine.add_spider(site_spider("s", site, "slow"), ONE_AT_A_TIME)
        with pytest.raises(InvalidTransition, match="cannot pause while idle"):
            engine.pause("s")
        with pytest.raises(RuntimeError, match="has not started"):
            await engine.wait()
        await engine.start()
        with pytest.raises(InvalidTransition, match="cannot resume while running"):
            engine.resume("s")
        assert engine.pause("s") is SpiderState.PAUSED
        with pytest.raises(InvalidTransition):
            engine.pause("s")
        assert engine.resume("s") is SpiderState.RUNNING
        assert await engine.stop_spider("s", deadline=5) is SpiderState.STOPPED
        with pytest.raises(InvalidTransition, match="cannot stop while stopped"):
            await engine.stop_spider("s")
        with pytest.raises(UnknownSpider):
            engine.pause("nobody")
        with pytest.raises(DuplicateSpider):
            engine.add_spider(site_spider("s", site), QUIET)


async def test_stop_deregisters_before_the_crawl_drains(site: str) -> None:
    order: list[str] = []
    registries: list[FakeRegistry] = []

    def factory(engine_id: str, describe: Any) -> FakeRegistry:
        registries.append(FakeRegistry(engine_id, describe, order))
        return registries[-1]

    engine = SpiderEngine(EngineSettings(id="e1", port=0), registry_factory=factory)
    crawler = engine.add_spider(site_spider("s", site, "slow"), QUIET)
    crawler.add_listener(lambda c: order.append(f"spider.{c.state}"))
    await engine.start()
    registry = registries[0]
    assert registry.engine_id == "e1"
    data = registry.describe().to_dict()
    assert data["spiders"] == [
        {"name": "s", "state": "running", "pages": 0, "items": 0, "failed": 0}
    ]  # a private frontier: no crawl identity
    assert data["status_url"] == f"http://127.0.0.1:{engine.port}/netdiscovery/engine"
    assert len(data["incarnation"]) == 32
    changes = registry.changes
    engine.add_spider(site_spider("t", site, "slow"), QUIET)
    assert registry.changes > changes
    await engine.stop()
    assert order == [
        "registry.start",
        "spider.starting",
        "spider.running",
        "registry.stop",
        "spider.stopping",
        "spider.stopped",
    ]
    assert {c.state for c in engine.crawlers()} == {SpiderState.STOPPED}


async def test_two_engines_share_one_loop_without_sharing_state(site: str) -> None:
    first = SpiderEngine(EngineSettings(port=0))
    second = SpiderEngine(EngineSettings(port=0))
    first.add_spider(site_spider("a", site), QUIET)
    second.add_spider(site_spider("a", site), QUIET)
    await first.start()
    await second.start()
    assert first.port != second.port
    assert first.id != second.id
    assert first.incarnation != second.incarnation
    await first.wait()
    await second.wait()
    await first.stop()
    await second.stop()
    assert first.crawler("a") is not second.crawler("a")
    assert first.crawler("a").stats.items == second.crawler("a").stats.items == 200


async def test_control_on_a_public_address_needs_a_token() -> None:
    engine = SpiderEngine(EngineSettings(host="0.0.0.0", port=0))
    with pytest.raises(ConfigError, match="not a loopback address") as info:
        await engine.start()
    assert info.value.key == "engine.token_env"
    assert is_loopback("::1")
    assert is_loopback("localhost")
    assert not is_loopback("10.0.0.5")


async def test_a_busy_port_fails_start_and_leaves_nothing_running() -> None:
    runner = web.AppRunner(web.Application())
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    port = runner.addresses[0][1]
    engine = SpiderEngine(EngineSettings(port=port))
    with pytest.raises(OSError, match=f"cannot serve HTTP on 127.0.0.1:{port}"):
        await engine.start()
    assert engine.state is EngineState.STOPPED
    await runner.cleanup()


def test_engine_id_defaults_to_host_name_and_port() -> None:
    assert EngineSettings(id="x").default_id(1) == "x"
    assert EngineSettings().default_id(8715).endswith("-8715")


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "engine.toml"
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("[engine]\nport = 'x'\n", "engine.port"),
        ("[engine]\nport = 70000\n", "engine.port"),
        ("[engine]\nbogus = 1\n", "engine.bogus"),
        ("[engine]\nid = 'a/b'\n", "engine.id"),
        ("[[spiders]]\nspider = 'nocolon'\n", "spiders[0].spider"),
        (
            "[[spiders]]\nspider = 'm:A'\n[[spiders]]\nspider = 'm:B'\n"
            "settings = { concurrency = 0 }\n",
            "spiders[1].settings.concurrency",
        ),
        ("[[spiders]]\nspider = 'm:A'\nsettings = { nope = 1 }\n", "spiders[0].settings.nope"),
        ("[[spiders]]\nspider = 'm:A'\nextra = 1\n", "spiders[0].extra"),
        ("[engine\n", "config"),
        ("[other]\n", "other"),
    ],
)
def test_bad_config_names_the_key(tmp_path: Path, text: str, key: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, text), environ={})
    assert info.value.key == key


def test_every_typo_of_a_config_is_named_in_one_run(tmp_path: Path) -> None:
    """Typos in every section said together, not one a run."""
    text = ("[engine]\nmax_job = 2\nprot = 1\n[zookeeper]\nhosts = '127.0.0.1:1'\n"
            "session_timout = 4\n[[spiders]]\nspider = 'm:A'\nsettings = { concurency = 2 }\n"
            "[[spiders]]\nspider = 'nocolon'\n")  # fmt: skip
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, text), environ={})
    lines = str(info.value).splitlines()
    assert lines[0] == "5 problems:"
    assert [line.split(":")[0].strip() for line in lines[1:]] == [
        "engine.max_job", "engine.prot", "zookeeper.session_timout",
        "spiders[0].settings.concurency", "spiders[1].spider",
    ]  # fmt: skip
    assert "did you mean engine.max_jobs?" in lines[1]
    assert "did you mean zookeeper.session_timeout?" in lines[3]
    assert info.value.key == "engine.max_job"


def test_config_layers_file_environment_and_command_line(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "[engine]\nid = 'e'\nport = 9000\n[[spiders]]\nspider = 'm:A'\n"
        "settings = { concurrency = 3, retries = 1 }\n",
    )
    environ = {"NETDISCO_ENGINE_PORT": "9001", "NETDISCO_RETRIES": "4", "TOK": "s3cret"}
    config = load_config(
        path, environ={**environ, "NETDISCO_ENGINE_TOKEN_ENV": "TOK"}, pairs={"timeout": "7"}
    )
    assert config.engine.port == 9001
    assert config.engine.token == "s3cret"
    assert "s3cret" not in repr(config)
    settings = config.spiders[0].settings({"concurrency": 9, "depth_limit": 2})
    assert (settings.concurrency, settings.retries, settings.timeout) == (3, 4, 7.0)
    assert settings.depth_limit == 2
    overridden = engine_settings({"port": 1}, environ={}, overrides={"port": 2, "host": None})
    assert overridden.port == 2


async def test_from_config_names_a_spider_that_cannot_load(tmp_path: Path) -> None:
    spider_file = tmp_path / "spiders.py"
    spider_file.write_text("from netdisco import Spider\nclass A(Spider):\n    name = 'a'\n")
    path = write(
        tmp_path,
        f"[[spiders]]\nspider = '{spider_file}:A'\n[[spiders]]\nspider = '{spider_file}:Nope'\n",
    )
    with pytest.raises(ConfigError) as info:
        SpiderEngine.from_config(load_config(path, environ={}))
    assert info.value.key == "spiders[1].spider"
    path = write(tmp_path, f"[[spiders]]\nspider = '{spider_file}:A'\n" * 2)
    with pytest.raises(ConfigError, match="already runs") as info:
        SpiderEngine.from_config(load_config(path, environ={}))
    assert info.value.key == "spiders[1].spider"


async def test_add_spider_takes_a_mapping_of_settings(site: str) -> None:
    async with SpiderEngine(standalone()) as engine:
        crawler = engine.add_spider(site_spider("q", site), {"max_pages": 5, "concurrency": 1})
        assert crawler.settings.max_pages == 5
        with pytest.raises(ConfigError, match="renamed to proxies") as caught:
            engine.add_spider(site_spider("p", site), {"proxy": "http://p:1"})
        assert caught.value.key == "proxy"
        states = await engine.run()
    assert states == {"q": SpiderState.FINISHED}
    assert crawler.stats.succeeded <= 5 + 1


def test_engine_stop_deadline_is_a_spider_setting(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="stop_deadline is a spider setting") as caught:
        load_config(write(tmp_path, "[engine]\nstop_deadline = 5\n"), environ={})
    assert caught.value.key == "engine.stop_deadline"
