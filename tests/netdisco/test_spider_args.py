"""Spider arguments and Scrapy setting names in engine.toml and over HTTP, on a live engine."""

from __future__ import annotations

from typing import Any

import pytest

from netdisco.crawl.arguments import MAX_ARGS, check_args
from netdisco.crawl.settings import from_env, from_mapping
from netdisco.engine import SpiderEngine
from netdisco.engine.config import EngineSettings, parse_config
from netdisco.engine.launch import add_configured
from netdisco.exceptions import ConfigError
from netdisco.testing import eventually

from .service.spiders import Tree
from .test_service import TREE, call, engine

__all__ = ["engine"]  # the fixture, imported for this module's tests


async def test_args_and_scrapy_names_over_http(engine: SpiderEngine) -> None:
    body = {
        "spider": TREE,
        "name": "slow3",
        "args": {"speed": "slow"},
        "settings": {"CLOSESPIDER_PAGECOUNT": 3, "progress_interval": 0},
    }
    status, answer = await call(engine, "POST", "/spiders", body)
    assert status == 201, answer
    await eventually(lambda: engine.crawler("slow3").state == "finished", what="slow3 finished")
    crawler = engine.crawler("slow3")
    assert (crawler.spider.speed, crawler.stats.succeeded) == ("slow", 3)  # type: ignore[attr-defined]
    status, answer = await call(engine, "GET", "/spiders/slow3")
    assert answer["items_discarded"] == answer["items"] == 3  # no feed, no pipeline


@pytest.mark.parametrize(
    ("args", "key", "message"),
    [
        ({"parse": "x"}, "args.parse", "would replace Spider.parse"),
        ({"speed": 5}, "args.speed", "expected a string"),
        ({"_secret": "x"}, "args._secret", "must not begin with '_'"),
        ("speed=slow", "args", "expected a table"),
        ({f"a{n}": "x" for n in range(MAX_ARGS + 1)}, "args", f"at most {MAX_ARGS} arguments"),
        ({"speed": "x" * 10_000}, "args.speed", "longer than 8192 characters"),
    ],
)
async def test_bad_args_over_http_start_nothing(
    engine: SpiderEngine, args: Any, key: str, message: str
) -> None:
    status, answer = await call(engine, "POST", "/spiders", {"spider": TREE, "args": args})
    assert (status, answer["error"]["key"]) == (400, key), answer
    assert message in answer["error"]["message"]
    assert engine.crawlers() == []


CONFIG = {
    "spiders": [
        {
            "spider": "tests.netdisco.service.spiders:Tree",
            "args": {"speed": "slow"},
            "settings": {"DOWNLOAD_DELAY": 0.25, "CONCURRENT_REQUESTS_PER_DOMAIN": 2},
        }
    ]
}


def test_args_and_scrapy_names_in_engine_toml() -> None:
    config = parse_config(CONFIG, environ={})
    assert config.spiders[0].args == {"speed": "slow"}
    engine = SpiderEngine(EngineSettings(id="args", port=0, http=False))
    add_configured(engine, config)
    crawler = engine.crawler("tree")
    assert crawler.spider.speed == "slow"  # type: ignore[attr-defined]
    assert (crawler.settings.download_delay, crawler.settings.per_host_concurrency) == (0.25, 2)


@pytest.mark.parametrize(
    ("entry", "key"),
    [
        ({"args": {"speed": 3}}, "spiders[0].args.speed"),
        ({"args": {"parse": "x"}}, "spiders[0].args.parse"),
        ({"settings": {"DOWNLOAD_DELAI": 1}}, "spiders[0].settings.DOWNLOAD_DELAI"),
    ],
)
def test_bad_entries_name_the_key(entry: dict[str, Any], key: str) -> None:
    config = {"spiders": [{"spider": "tests.netdisco.service.spiders:Tree", **entry}]}
    engine = SpiderEngine(EngineSettings(id="args", port=0, http=False))
    with pytest.raises(ConfigError) as caught:
        add_configured(engine, parse_config(config, environ={}))
    assert caught.value.key == key


def test_scrapy_names_are_aliases_or_refused_with_a_suggestion() -> None:
    settings = from_mapping({"DOWNLOAD_DELAY": "0.5", "RETRY_TIMES": 4, "USER_AGENT": "a/1"})
    assert (settings.download_delay, settings.retries, settings.user_agents) == (0.5, 4, ("a/1",))
    assert from_env({"NETDISCO_CONCURRENT_REQUESTS": "3"}).concurrency == 3
    with pytest.raises(ConfigError, match=r"^max_page: unknown setting; did you mean max_pages\?$"):
        from_mapping({"max_page": 1})
    with pytest.raises(ConfigError, match="SPIDER_MIDDLEWARES: netdisco has no spider middleware"):
        from_mapping({"SPIDER_MIDDLEWARES": {"p.m.M": 543}})
    with pytest.raises(ConfigError, match=r"^zzzz: unknown setting \(docs/configuration.md"):
        from_mapping({"zzzz": 1})
    with pytest.raises(ConfigError, match=r"engine.prot: unknown key; did you mean engine.port\?"):
        parse_config({"engine": {"prot": 1}}, environ={})


def test_arguments_become_attributes_of_a_spider_without_keywords() -> None:
    assert check_args({"speed": "slow"}, Tree) == {"speed": "slow"}
