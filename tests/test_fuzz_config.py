"""Fuzzing the configuration parsers: random TOML values (``inf`` and ``nan`` included)
for every known key of the spider, engine, ZooKeeper and monitor settings, and random
TOML text. Whatever the input, the answer is a value or a ``ConfigError`` naming a key,
never another exception."""

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
from netdisco.engine.config import ENGINE_KEYS, parse_config
from netdisco.exceptions import ConfigError
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
