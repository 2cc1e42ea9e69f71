"""Configuration: TOML, then environment, then flags; bad values name their key."""

from __future__ import annotations

from pathlib import Path

import pytest

from monitor.config import load_config
from monitor.events import EventType
from netdisco.exceptions import ConfigError

TOML = """
[zookeeper]
hosts = "127.0.0.1:2181"
root = "/netdiscovery"
session_timeout = 6.0

[http]
port = 9000

[alerts]
state_file = "{state}"

[email]
host = "127.0.0.1"
port = 2525
sender = "netdisco@example.org"
to = ["ops@example.org"]
username_env = "SMTP_USER"
password_env = "SMTP_PASSWORD"
events = ["engine_lost", "cluster_empty"]

[webhook]
url = "http://127.0.0.1:9000/hook"
"""


@pytest.fixture
def toml_file(tmp_path: Path) -> Path:
    path = tmp_path / "monitor.toml"
    path.write_text(TOML.format(state=tmp_path / "state.json"))
    return path


def test_file_then_environment_then_flags(toml_file: Path) -> None:
    env = {
        "SMTP_USER": "robot",
        "SMTP_PASSWORD": "s3cret",
        "NETDISCO_MONITOR_HTTP_PORT": "9100",
        "NETDISCO_MONITOR_ALERTS_GRACE": "3.5",
        "NETDISCO_MONITOR_EMAIL_TO": "a@example.org, b@example.org",
    }
    config = load_config(toml_file, env=env, overrides={"http.port": 9200, "zookeeper.root": None})
    assert config.zookeeper.hosts == "127.0.0.1:2181"
    assert config.zookeeper.session_timeout == 6.0
    assert config.http.port == 9200  # flag beats environment beats file
    assert config.alerts.grace == 3.5
    assert config.email is not None
    assert config.email.to == ("a@example.org", "b@example.org")
    assert config.email.password == "s3cret"
    assert config.email.events == {EventType.ENGINE_LOST, EventType.CLUSTER_EMPTY}
    assert config.webhook is not None
    assert config.webhook.events == {EventType.ENGINE_LOST}
    assert "s3cret" not in repr(config)  # secrets never printed


def test_defaults() -> None:
    config = load_config(None, env={}, overrides={"zookeeper.hosts": "h:1"})
    assert config.zookeeper.root == "/netdiscovery"
    assert config.http.port == 8316
    assert config.alerts.grace == config.zookeeper.session_timeout + 5.0
    assert config.alerts.offline_events == {EventType.ENGINE_LOST, EventType.CLUSTER_EMPTY}
    assert config.email is None


@pytest.mark.parametrize(
    ("text", "env", "key"),
    [
        ("[zookeeper]\nroot='/x'\n", {}, "zookeeper.hosts"),
        ("[zookeeper]\nhosts='h'\nroot='x/'\n", {}, "zookeeper.root"),
        ("[zookeeper]\nhosts='h'\nsession_timeout='soon'\n", {}, "zookeeper.session_timeout"),
        ("[zookeeper]\nhosts='h'\ntypo=1\n", {}, "zookeeper.typo"),
        ("[zookeper]\nhosts='h'\n", {}, "zookeper"),
        ("[zookeeper]\nhosts='h'\n[http]\nport=70000\n", {}, "http.port"),
        ("[zookeeper]\nhosts='h'\n", {"NETDISCO_MONITOR_HTTP_PORT": "eighty"}, "http.port"),
        ("[zookeeper]\nhosts='h'\n[alerts]\ngrace=-1\n", {}, "alerts.grace"),
        ("[zookeeper]\nhosts='h'\n[alerts]\nstate_file='/nope/x.json'\n", {}, "alerts.state_file"),
        ("[zookeeper]\nhosts='h'\n[alerts]\noffline_events=['engine_gone']\n", {},
         "alerts.offline_events"),
        ("[zookeeper]\nhosts='h'\n[email]\nto=['a@b']\n", {}, "email.sender"),
        ("[zookeeper]\nhosts='h'\n[email]\nsender='a@b'\nto=['c@d']\npassword_env='NOPE'\n", {},
         "email.password_env"),
        ("[zookeeper]\nhosts='h'\n[email]\nsender='a@b'\nto=['c@d']\ntls=true\nstarttls=true\n", {},
         "email.tls"),
        ("[zookeeper]\nhosts='h'\n[email]\nsender='a@b'\nto=['nobody']\n", {}, "email.to"),
        ("[zookeeper]\nhosts='h'\n[webhook]\nurl='ftp://x'\n", {}, "webhook.url"),
        ("[zookeeper]\nhosts='h'\n[command]\nevents=['engine_lost']\n", {}, "command.argv"),
        ("[zookeeper]\nhosts='h'\n[callable]\ntarget='not a path'\n", {}, "callable.target"),
        ("[zookeeper]\nhosts='h'\n[log]\nlevel='loud'\n", {}, "log.level"),
        ("[zookeeper]\nhosts='h'\n[log]\njson='maybe'\n", {}, "log.json"),
        ("zookeeper = 3\n", {}, "zookeeper"),
        ("[zookeeper\n", {}, "--config"),
    ],
)  # fmt: skip
def test_bad_config_names_the_key(tmp_path: Path, text: str, env: dict[str, str], key: str) -> None:
    path = tmp_path / "monitor.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_config(path, env=env)
    assert info.value.key == key
    assert str(info.value).startswith(f"{key}: ")


def test_missing_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "absent.toml", env={})
