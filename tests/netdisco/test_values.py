"""The one configuration parser: every source, every type, errors naming the key."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from monitor.config import load_config as load_monitor_config
from netdisco.cluster.settings import ZooKeeperSettings
from netdisco.engine.config import load_config as load_engine_config
from netdisco.exceptions import ConfigError
from netdisco.values import convert, parse_bool, read_toml


@pytest.mark.parametrize(
    ("value", "kind", "expected"),
    [
        ("yes", bool, True),
        (" Off ", bool, False),
        (True, bool, True),
        ("64", int, 64),
        (3.0, int, 3),
        ("1e3", int, 1000),
        ("0.25", float, 0.25),
        (2, float, 2.0),
        ("a, b,,c", tuple[str, ...], ("a", "b", "c")),
        ('["a,b"]', tuple[str, ...], ("a,b",)),
        (None, float | None, None),
        ("1.5", float | None, 1.5),
        ("123", str, "123"),
    ],
)
def test_values_convert_by_declared_type(value: Any, kind: Any, expected: Any) -> None:
    result = convert("k", value, kind)
    assert result == expected
    assert type(result) is type(expected)


@pytest.mark.parametrize(
    ("value", "kind", "message"),
    [
        (float("inf"), float, "must be a finite number"),
        ("nan", float, "expected float, got 'nan'"),
        ("NaN", float, "must be a finite number"),
        ("Infinity", int, "must be a finite number"),
        (float("nan"), int, "must be a finite number"),
        ("1.5", int, "expected int, got 1.5"),
        ("true", int, "expected int, got True"),
        (True, float, "expected float, got True"),
        ("maybe", bool, "expected true or false"),
        (1, bool, "expected true or false"),
        (5, str, "expected str"),
        ([1], tuple[str, ...], "expected tuple"),
    ],
)
def test_bad_values_name_the_key(value: Any, kind: Any, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as caught:
        convert("section.key", value, kind)
    assert caught.value.key == "section.key"


def test_typed_sources_refuse_text_where_a_number_is_declared() -> None:
    assert convert("k", "10", float) == 10.0
    with pytest.raises(ConfigError, match="expected float, got '10'"):
        convert("k", "10", float, text=False)
    assert convert("k", "text", str, text=False) == "text"


def test_an_undeclared_type_is_a_programming_error() -> None:
    with pytest.raises(TypeError, match="no parser"):
        convert("k", "x", bytes)


def test_bool_words() -> None:
    assert [parse_bool("k", w) for w in ("1", "true", "YES", "on")] == [True] * 4
    assert [parse_bool("k", w) for w in ("0", "false", "No", "off")] == [False] * 4


def test_read_toml_errors_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read") as missing:
        read_toml(tmp_path / "absent.toml", key="--config")
    assert missing.value.key == "--config"
    bad = tmp_path / "bad.toml"
    bad.write_text("[engine\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        read_toml(bad)
    latin = tmp_path / "latin.toml"
    latin.write_bytes(b"name = '\xe9t\xe9'\n")
    with pytest.raises(ConfigError, match="not UTF-8"):
        read_toml(latin)


@pytest.mark.parametrize(
    ("text", "key"),
    [
        (
            "[[spiders]]\nspider='m:C'\nsettings={concurrency=inf}\n",
            "spiders[0].settings.concurrency",
        ),
        ("[[spiders]]\nspider='m:C'\nsettings={timeout=nan}\n", "spiders[0].settings.timeout"),
        ("[engine]\nstatus_cache=inf\n", "engine.status_cache"),
        ("[engine]\nport=8715.5\n", "engine.port"),
        ("[engine]\nport='8715'\n", "engine.port"),
    ],
)
def test_engine_file_with_inf_or_nan_names_the_key(tmp_path: Path, text: str, key: str) -> None:
    path = tmp_path / "engine.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as caught:
        load_engine_config(path, environ={})
    assert caught.value.key == key


@pytest.mark.parametrize(
    ("text", "env", "key"),
    [
        ("[zookeeper]\nhosts='h'\nresync_interval=nan\n", {}, "zookeeper.resync_interval"),
        ("[zookeeper]\nhosts='h'\n", {"NETDISCO_MONITOR_ALERTS_GRACE": "inf"}, "alerts.grace"),
        ("[zookeeper]\nhosts='h'\n[http]\npoll_status=-inf\n", {}, "http.poll_status"),
    ],
)
def test_monitor_file_with_inf_or_nan_names_the_key(
    tmp_path: Path, text: str, env: dict[str, str], key: str
) -> None:
    path = tmp_path / "monitor.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as caught:
        load_monitor_config(path, env=env)
    assert caught.value.key == key


def test_one_zookeeper_settings_for_engine_and_monitor(tmp_path: Path) -> None:
    path = tmp_path / "monitor.toml"
    path.write_text("[zookeeper]\nhosts='zk:2181/chroot'\nresync_interval=7\n")
    monitor = load_monitor_config(path, env={}).zookeeper
    assert isinstance(monitor, ZooKeeperSettings)
    assert (monitor.hosts, monitor.resync_interval) == ("zk:2181/chroot", 7.0)
    engine = ZooKeeperSettings.from_mapping(
        {"hosts": "zk"}, environ={"NETDISCO_ZOOKEEPER_SESSION_TIMEOUT": "4"}
    )
    assert engine.session_timeout == 4.0
    with pytest.raises(ConfigError, match="unknown key") as caught:
        ZooKeeperSettings.from_mapping({"hosts": "zk", "resync_interval": 3})
    assert caught.value.key == "zookeeper.resync_interval"
