"""Fuzzing the configuration parsers: random TOML values (``inf`` and ``nan`` included)
for every known key of the spider, engine, ZooKeeper and monitor settings, random
TOML text, and random launch bodies and feed templates. Whatever the input, the
answer is a value or a ``ConfigError`` naming a key, never another exception."""

from __future__ import annotations

import contextlib
import dataclasses
import math
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from monitor.config import load_config, schema
from netdisco.cluster.settings import ZooKeeperSettings
from netdisco.crawl import settings as crawl_settings
from netdisco.crawl.feeds.pipeline import feed_path
from netdisco.engine.config import ENGINE_KEYS, EngineSettings, parse_config
from netdisco.engine.launch import HTTP_REFUSED, HTTP_SETTINGS, from_body
from netdisco.exceptions import ConfigError, FeedError
from netdisco.values import read_toml
from tests.fuzzing import examples

pytestmark = pytest.mark.fuzz

_number = st.one_of(
    st.integers(),
    st.floats(),  # inf, -inf and nan among them
    st.sampled_from([math.inf, -math.inf, math.nan, 0, -1, 2**63, 1e308, -0.0]),
)
_text = st.one_of(
    st.text(max_size=30), st.sampled_from(["inf", "nan", "-inf", "1e999", "true", "", " 5 "])
)
_toml: st.SearchStrategy[Any] = st.recursive(
    st.one_of(st.booleans(), _number, _text, st.datetimes()),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=10,
)


def _table(keys: list[str]) -> st.SearchStrategy[dict[str, Any]]:
    return st.dictionaries(st.sampled_from(keys) | st.text(max_size=8), _toml, max_size=6)


def _only_config_errors(parse: Any, *args: Any, **kwargs: Any) -> None:
    """Call ``parse``: a result or a ConfigError is fine, anything else fails the test."""
    with contextlib.suppress(ConfigError):
        parse(*args, **kwargs)


_CRAWL_KEYS = [f.name for f in dataclasses.fields(crawl_settings.Settings)]


@examples(60)
@given(table=_table(_CRAWL_KEYS))
def test_spider_settings(table: dict[str, Any]) -> None:
    _only_config_errors(crawl_settings.from_mapping, table)


@examples(40)
@given(text=st.dictionaries(st.sampled_from(_CRAWL_KEYS), _text.map(str), max_size=4))
def test_spider_settings_from_the_environment(text: dict[str, str]) -> None:
    environ = {f"NETDISCO_{key.upper()}": value for key, value in text.items()}
    _only_config_errors(crawl_settings.from_env, environ)


@examples(60)
@given(
    engine=_table(list(ENGINE_KEYS)),
    zookeeper=_table(["hosts", "root", "session_timeout", "audit_interval", "digest_env"]),
    spiders=st.lists(
        st.fixed_dictionaries(
            {"spider": st.just("tests.x:Spider") | _text, "settings": _table(_CRAWL_KEYS)}
        )
        | _toml,
        max_size=3,
    ),
)
def test_engine_config(engine: Any, zookeeper: Any, spiders: Any) -> None:
    _only_config_errors(
        parse_config, {"engine": engine, "zookeeper": zookeeper, "spiders": spiders}, environ={}
    )
    _only_config_errors(ZooKeeperSettings.from_mapping, zookeeper, environ={})


_MONITOR_KEYS = [f"{section}.{key}" for section, keys in schema().items() for key in keys]


@examples(60)
@given(overrides=st.dictionaries(st.sampled_from(_MONITOR_KEYS), _toml, min_size=1, max_size=6))
def test_monitor_config(overrides: dict[str, Any]) -> None:
    overrides.setdefault("zookeeper.hosts", "127.0.0.1:2181")
    _only_config_errors(load_config, None, env={}, overrides=overrides)


@pytest.fixture
def toml_file(tmp_path: Path) -> Path:
    return tmp_path / "fuzzed.toml"


@examples(40)
@given(text=st.text(max_size=200) | st.binary(max_size=200).map(lambda b: b.decode("latin-1")))
def test_toml_text(toml_file: Path, text: str) -> None:
    toml_file.write_text(text, encoding="utf-8", errors="surrogatepass")
    _only_config_errors(read_toml, toml_file)


# -- what a POST /netdiscovery/spiders body may ask for (issue 27) ---------------------

_PIECES = st.sampled_from(
    [
        *("{spider}", "{engine}", "{time}", "{spider:>9}", "{spider!r}", "{", "}", "..", "/"),
        *("\\", "a", ".jsonl", ".csv", ".db", ".py", "sqlite://", "file://", "-", "\x00"),
        "\uff0e",
    ]
)
_templates = st.lists(_PIECES | st.text(max_size=4), max_size=8).map("".join)
_LAUNCH_KEYS = sorted(HTTP_SETTINGS | set(HTTP_REFUSED))


@examples(60)
@given(
    feeds=st.dictionaries(_templates, st.just({}) | _toml, max_size=3),
    table=st.just({}) | _table(_LAUNCH_KEYS),
    name=st.none() | _text,
)
def test_launch_bodies_stay_under_feeds_dir(
    tmp_path_factory: pytest.TempPathFactory, feeds: Any, table: dict[str, Any], name: Any
) -> None:
    """A launch body is a Launch whose feeds all land under ``feeds_dir`` and whose
    settings are all allowed over HTTP, or a ConfigError / FeedError; nothing else."""
    root = tmp_path_factory.mktemp("feeds")
    engine = EngineSettings(spider_modules=("tests.netdisco.service",), feeds_dir=str(root))
    body: dict[str, Any] = {"spider": "tests.netdisco.service.spiders:Tree"}
    body["settings"] = {**table, "feeds": feeds} if feeds else table
    if name is not None:
        body["name"] = name
    try:
        spec = from_body(body, engine, "fuzz")
    except (ConfigError, FeedError):
        return
    assert not set(body["settings"]) & set(HTTP_REFUSED)
    for feed in spec.settings.feeds if feeds else ():
        path = feed_path(feed, spider=spec.name, engine="fuzz", now=0.0)
        assert Path(path).resolve().is_relative_to(root.resolve()), path
