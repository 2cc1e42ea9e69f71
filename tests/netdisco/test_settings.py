"""Settings: defaults, validation that names the key, ``-s`` text, TOML values, environment."""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import pytest

from netdisco import Settings
from netdisco.crawl.settings import from_env, from_mapping, parse_pairs
from netdisco.exceptions import ConfigError


def test_defaults_are_valid_and_frozen() -> None:
    settings = Settings()
    assert (settings.concurrency, settings.obey_robots, settings.max_pages) == (16, True, 0)
    assert settings.user_agent.startswith("netdisco/")
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.concurrency = 1  # type: ignore[misc]


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("concurrency", 0, "must be greater than 0"),
        ("per_host_concurrency", -1, "must be greater than 0"),
        ("timeout", 0.0, "must be greater than 0"),
        ("item_buffer", 0, "must be greater than 0"),
        ("download_delay", -0.5, "must not be negative"),
        ("max_pages", -1, "must not be negative"),
        ("retries", -2, "must not be negative"),
        ("timeout", float("nan"), "must be a finite number"),
        ("download_delay", float("inf"), "must be a finite number"),
        ("allow", ("(unclosed",), "invalid regular expression '(unclosed'"),
        ("deny", ("ok", "[z-a]"), "invalid regular expression '[z-a]'"),
        ("frontier", "postgres://x", "expected 'memory' or a redis:// URL"),
    ],
)
def test_invalid_values_name_the_key(key: str, value: Any, message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)) as caught:
        Settings(**{key: value})
    assert caught.value.key == key
    assert str(caught.value).startswith(f"{key}: ")


@pytest.mark.parametrize(
    ("key", "text", "expected"),
    [
        ("concurrency", "64", 64),
        ("download_delay", "0.25", 0.25),
        ("download_delay", "2", 2.0),
        ("obey_robots", "false", False),
        ("obey_robots", "Yes", True),
        ("obey_robots", "0", False),
        ("allow", r"/shop/,/item/\d+", ("/shop/", r"/item/\d+")),
        ("deny", '["a,b", "c"]', ("a,b", "c")),
        ("allow", r"/p/\d{1,3},/q/[,;],(a|,b)x", (r"/p/\d{1,3}", "/q/[,;]", "(a|,b)x")),
        ("deny", r"a\,b,,c", (r"a\,b", "c")),
        ("deny", "", ()),
        ("user_agents", "my bot/1.0 (+http://x.test)", ("my bot/1.0 (+http://x.test)",)),
        ("user_agents", "Mozilla/5.0 (KHTML, like Gecko)", ("Mozilla/5.0 (KHTML, like Gecko)",)),
        ("user_agents", '["a, b", "c"]', ("a, b", "c")),
        ("user_agents", "123", ("123",)),
        ("proxies", "http://127.0.0.1:3128", ("http://127.0.0.1:3128",)),
        ("proxies", "http://p1:3128,http://p2:3128", ("http://p1:3128", "http://p2:3128")),
        ("frontier", "redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"),
    ],
)
def test_text_values_are_parsed(key: str, text: str, expected: Any) -> None:
    assert getattr(from_mapping({key: text}), key) == expected


@pytest.mark.parametrize(
    ("key", "text", "message"),
    [
        ("concurrency", "many", "expected int, got 'many'"),
        ("concurrency", "1.5", "expected int, got 1.5"),
        ("concurrency", "true", "expected int, got True"),
        ("obey_robots", "maybe", "expected true or false, got 'maybe'"),
        ("timeout", "NaN", "must be a finite number"),
        ("allow", "[1, 2]", "expected tuple"),
        ("deny", "[unclosed", "expected a JSON list of strings"),
        ("max_pages", "-3", "must not be negative"),
    ],
)
def test_bad_text_names_the_key(key: str, text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as caught:
        from_mapping({key: text})
    assert caught.value.key == key


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("concurrency", True),
        ("concurrency", 2.5),
        ("obey_robots", 1),
        ("timeout", "fast"),
        ("allow", [1]),
        ("user_agents", None),
        ("user_agents", 5),
        ("proxies", 8080),
    ],
)
def test_toml_values_of_the_wrong_type(key: str, value: Any) -> None:
    with pytest.raises(ConfigError, match="expected") as caught:
        from_mapping({key: value})
    assert caught.value.key == key


def test_toml_values_of_the_right_type() -> None:
    settings = from_mapping({"concurrency": 4, "timeout": 3, "allow": ["/a"], "proxies": []})
    assert (settings.concurrency, settings.timeout, settings.allow, settings.proxies) == (
        4,
        3.0,
        ("/a",),
        (),
    )
    assert isinstance(settings.timeout, float)


def test_unknown_setting_lists_the_known_ones() -> None:
    with pytest.raises(ConfigError, match="unknown setting") as caught:
        from_mapping({"concurency": 4})
    assert caught.value.key == "concurency"
    assert "concurrency" in str(caught.value)


@pytest.mark.parametrize(("old", "new"), [("user_agent", "user_agents"), ("proxy", "proxies")])
def test_a_renamed_setting_names_the_new_one(old: str, new: str) -> None:
    with pytest.raises(ConfigError, match=f"renamed to {new}") as caught:
        from_mapping({old: "x"})
    assert caught.value.key == old
    with pytest.raises(ConfigError, match=f"renamed to {new}") as caught:
        from_env({f"NETDISCO_{old.upper()}": "x"})
    assert caught.value.key == f"NETDISCO_{old.upper()}"


def test_one_agent_or_proxy_is_the_default_of_every_request() -> None:
    settings = from_mapping({"user_agents": "bot/1", "proxies": "http://p:1"})
    assert (settings.user_agent, settings.proxy) == ("bot/1", "http://p:1")
    rotated = from_mapping({"user_agents": ["a", "b"], "proxies": ["http://p:1", "http://q:1"]})
    assert (rotated.user_agent, rotated.proxy) == ("a", None)  # the rotation picks a proxy
    assert Settings().user_agent.startswith("netdisco/")


def test_parse_pairs() -> None:
    assert parse_pairs(["concurrency=64", " user_agent = a=b", "deny="]) == {
        "concurrency": "64",
        "user_agent": " a=b",
        "deny": "",
    }
    with pytest.raises(ConfigError, match="expected name=value") as caught:
        parse_pairs(["concurrency"])
    assert caught.value.key == "concurrency"
    with pytest.raises(ConfigError, match="expected name=value"):
        parse_pairs(["=5"])


def test_environment_over_base() -> None:
    base = Settings(concurrency=4, retries=5)
    env = {
        "NETDISCO_CONCURRENCY": "32",
        "NETDISCO_OBEY_ROBOTS": "off",
        "NETDISCO_NOT_A_SETTING": "x",
    }
    settings = from_env(env, base=base)
    assert (settings.concurrency, settings.obey_robots, settings.retries) == (32, False, 5)
    with pytest.raises(ConfigError, match="must be greater than 0") as caught:
        from_env({"NETDISCO_PER_HOST_CONCURRENCY": "0"})
    assert caught.value.key == "per_host_concurrency"


def test_environment_defaults_to_os_environ(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NETDISCO_MAX_PAGES", "12")
    assert from_env().max_pages == 12


def test_replace_validates() -> None:
    settings = Settings().replace(concurrency="8", deny=["x"])
    assert (settings.concurrency, settings.deny) == (8, ("x",))
    with pytest.raises(ConfigError, match="concurrency"):
        settings.replace(concurrency=0)


def test_a_crawler_takes_a_mapping_over_the_spiders_custom_settings() -> None:
    from netdisco import Spider
    from netdisco.crawl.crawler import Crawler

    class Custom(Spider):
        name = "custom"
        custom_settings = {"concurrency": 3, "retries": 5}  # noqa: RUF012

    crawler = Crawler(Custom(), {"max_pages": "5", "retries": 1})
    s = crawler.settings
    assert (s.concurrency, s.retries, s.max_pages) == (3, 1, 5)
    given = Crawler(Custom(), Settings(retries=4)).settings  # what the Settings chose wins
    assert (given.retries, given.concurrency) == (4, 3)  # and custom_settings fill the rest
    with pytest.raises(ConfigError, match="must be greater than 0") as caught:
        Crawler(Custom(), {"concurrency": 0})
    assert caught.value.key == "concurrency"


def test_add_spider_with_settings_honours_the_spiders_custom_settings() -> None:
    from netdisco import Spider, SpiderEngine
    from netdisco.engine import EngineSettings

    class Custom(Spider):
        name = "custom"
        custom_settings = {"concurrency": 3, "retries": 5, "obey_robots": False}  # noqa: RUF012

    engine = SpiderEngine(EngineSettings(port=0))
    crawler = engine.add_spider(Custom(), Settings(retries=1, max_pages=7))
    s = crawler.settings
    # the program's choices over the spider's, and the spider's over the defaults, as the
    # command line, an engine's file and an HTTP launch merge them
    assert (s.retries, s.max_pages, s.concurrency, s.obey_robots) == (1, 7, 3, False)


def test_every_entry_point_names_its_sources_and_the_table_orders_them() -> None:
    from netdisco.crawl.settings import CUSTOM, PRIORITIES, layered
    from netdisco.schema import Source

    sources = {
        "command_line": Source({"retries": 4}, "-s {key}"),
        "environment": Source({"retries": 3, "concurrency": 9}),
        "file": Source({"retries": 2, "concurrency": 8, "max_pages": 6}),
        "spider": Source(
            {"retries": 1, "concurrency": 7, "max_pages": 5, "depth_limit": 2}, CUSTOM
        ),
    }
    s = layered(**sources)  # given highest first: the order is the table's, not the caller's
    assert (s.retries, s.concurrency, s.max_pages, s.depth_limit) == (4, 9, 6, 2)
    assert sorted(PRIORITIES, key=PRIORITIES.__getitem__) == [
        "project", "spider", "file", "environment", "command_line"
    ]  # fmt: skip
    with pytest.raises(TypeError, match="unknown settings sources"):
        layered(settings_py=Source({}))
