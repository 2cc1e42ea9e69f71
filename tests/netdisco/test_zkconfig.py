"""``[zookeeper]`` settings and the digest identity (pure logic, no server)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from netdisco.cluster.settings import ZooKeeperSettings
from netdisco.exceptions import ConfigError

SECRET = "s3cret-Pw"


def test_settings_defaults_and_full_mapping() -> None:
    assert ZooKeeperSettings.from_mapping({"hosts": "127.0.0.1:2181"}) == ZooKeeperSettings(
        hosts="127.0.0.1:2181"
    )
    settings = ZooKeeperSettings.from_mapping(
        {
            "hosts": "zk1:2181,zk2,[::1]:2182/apps/crawl",
            "root": "/nd/engines",
            "session_timeout": 4,
            "digest_file": "/run/secrets/zk",
            "audit_interval": 2.5,
        }
    )
    assert settings.root == "/nd/engines"
    assert settings.session_timeout == 4.0
    assert settings.digest_file == "/run/secrets/zk"


def test_settings_from_the_environment_override_the_table() -> None:
    environ = {"NETDISCO_ZOOKEEPER_HOSTS": "zk9:2181", "NETDISCO_ZOOKEEPER_SESSION_TIMEOUT": "4"}
    settings = ZooKeeperSettings.from_mapping({"hosts": "zk1"}, environ=environ)
    assert (settings.hosts, settings.session_timeout) == ("zk9:2181", 4.0)
    with pytest.raises(ConfigError) as info:
        ZooKeeperSettings.from_mapping(
            {},
            environ={
                "NETDISCO_ZOOKEEPER_HOSTS": "zk",
                "NETDISCO_ZOOKEEPER_AUDIT_INTERVAL": "soon",
            },
        )
    assert info.value.key == "zookeeper.audit_interval"


@pytest.mark.parametrize(
    ("data", "key"),
    [
        ({}, "zookeeper.hosts"),
        ({"hosts": ""}, "zookeeper.hosts"),
        ({"hosts": "zk:notaport"}, "zookeeper.hosts"),
        ({"hosts": "zk:2181/chroot/"}, "zookeeper.hosts"),
        ({"hosts": "zk", "root": "netdiscovery"}, "zookeeper.root"),
        ({"hosts": "zk", "root": "/a//b"}, "zookeeper.root"),
        ({"hosts": "zk", "session_timeout": 0}, "zookeeper.session_timeout"),
        ({"hosts": "zk", "session_timeout": "10"}, "zookeeper.session_timeout"),
        ({"hosts": "zk", "session_timeout": True}, "zookeeper.session_timeout"),
        ({"hosts": "zk", "audit_interval": float("nan")}, "zookeeper.audit_interval"),
        ({"hosts": "zk", "digest_env": "NOT-A-NAME"}, "zookeeper.digest_env"),
        ({"hosts": "zk", "digest_env": "A", "digest_file": "f"}, "zookeeper.digest_file"),
        ({"hosts": "zk", "sesion_timeout": 3}, "zookeeper.sesion_timeout"),
    ],
)
def test_bad_settings_name_the_key(data: dict[str, Any], key: str) -> None:
    with pytest.raises(ConfigError) as info:
        ZooKeeperSettings.from_mapping(data)
    assert info.value.key == key


def test_credentials_from_env_and_file_never_leak(tmp_path: Path) -> None:
    settings = ZooKeeperSettings(hosts="zk", digest_env="ZK_DIGEST")
    creds = settings.credentials({"ZK_DIGEST": f"engines:{SECRET}"})
    assert creds is not None
    assert (creds.user, creds.password) == ("engines", SECRET)
    assert SECRET not in repr(creds)
    assert SECRET not in repr(settings)
    with pytest.raises(ConfigError, match="ZK_DIGEST is not set") as unset:
        settings.credentials({})
    assert unset.value.key == "zookeeper.digest_env"
    with pytest.raises(ConfigError, match="user:password") as malformed:
        settings.credentials({"ZK_DIGEST": SECRET})
    assert SECRET not in str(malformed.value)

    secret_file = tmp_path / "digest"
    secret_file.write_text(f"engines:{SECRET}\n")
    from_file = ZooKeeperSettings(hosts="zk", digest_file=str(secret_file)).credentials()
    assert from_file == creds
    with pytest.raises(ConfigError) as missing:
        ZooKeeperSettings(hosts="zk", digest_file=str(tmp_path / "nope")).credentials()
    assert missing.value.key == "zookeeper.digest_file"
    assert ZooKeeperSettings(hosts="zk").credentials() is None
