"""The ``[zookeeper]`` settings of engines and monitors, and the digest identity they name.

Settings hold only *where* the digest secret lives (an environment variable or a
file), never the secret itself, so a settings object can be logged or shown
safely. The secret is read once, when a ``Registration`` is built, and a missing
or malformed one fails at start with the offending key in the message.
"""

from __future__ import annotations

import os
import re
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kazoo.security import ACL, make_acl, make_digest_acl

from netdisco.cluster.contract import DEFAULT_ROOT, TOMBSTONE_MAX_AGE
from netdisco.exceptions import ConfigError
from netdisco.values import check_keys, convert, field_types

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
#: the keys an engine's ``[zookeeper]`` table may hold
ENGINE_KEYS = (
    "hosts",
    "root",
    "session_timeout",
    "digest_env",
    "digest_file",
    "audit_interval",
    "tombstone_max_age",
)
#: the keys a monitor's ``[zookeeper]`` table may hold
MONITOR_KEYS = (
    "hosts",
    "root",
    "session_timeout",
    "resync_interval",
    "digest_env",
    "digest_file",
    "tombstone_max_age",
)


@dataclass(frozen=True, kw_only=True)
class DigestCredentials:
    """A ZooKeeper digest identity; the password never shows in ``repr``."""

    user: str
    password: str = field(repr=False)

    @property
    def auth_data(self) -> list[tuple[str, str]]:
        """The ``auth_data`` KazooClient sends on every (re)connection."""
        return [("digest", f"{self.user}:{self.password}")]

    def node_acl(self) -> list[ACL]:
        """Anyone may read (monitors need no secret); only this identity may change."""
        return [
            make_acl("world", "anyone", read=True),
            make_digest_acl(self.user, self.password, all=True),
        ]


@dataclass(frozen=True, kw_only=True)
class ZooKeeperSettings:
    """Where engines register and monitors look; defaults live here and nowhere else."""

    hosts: str  # a /chroot suffix is honoured
    root: str = DEFAULT_ROOT
    session_timeout: float = 10.0
    digest_env: str | None = None
    digest_file: str | None = None
    audit_interval: float = 5.0  # engine: how often it re-checks its node anyway
    resync_interval: float = 30.0  # monitor: full re-read, in case a watch was missed
    tombstone_max_age: float = TOMBSTONE_MAX_AGE  # leave tombstones older than this go

    @classmethod
    def from_mapping(
        cls,
        data: Mapping[str, Any],
        *,
        prefix: str = "zookeeper",
        environ: Mapping[str, str] | None = None,
        keys: tuple[str, ...] = ENGINE_KEYS,
    ) -> ZooKeeperSettings:
        """Validate a ``[zookeeper]`` table; a ``ConfigError`` names the bad key.

        With ``environ``, ``NETDISCO_<PREFIX>_<KEY>`` variables override the table.
        ``keys`` are the keys this table may hold (``ENGINE_KEYS``, ``MONITOR_KEYS``).
        """
        check_keys(prefix, data, keys)
        values = {k: convert(f"{prefix}.{k}", v, _TYPES[k], text=False) for k, v in data.items()}
        if environ is not None:
            found = _from_environ(environ, prefix, keys)
            values.update({k: convert(f"{prefix}.{k}", v, _TYPES[k]) for k, v in found.items()})
        if "hosts" not in values:
            raise ConfigError(f"{prefix}.hosts", "is required (e.g. '127.0.0.1:2181')")
        settings = cls(
            hosts=_hosts(values["hosts"], f"{prefix}.hosts"),
            root=_znode_path(values.get("root", cls.root), f"{prefix}.root"),
            digest_env=_env_name(values.get("digest_env"), f"{prefix}.digest_env"),
            digest_file=_optional_str(values.get("digest_file"), f"{prefix}.digest_file"),
            **{k: _seconds(values[k], f"{prefix}.{k}") for k in _DURATIONS if k in values},
        )
        if settings.digest_env and settings.digest_file:
            raise ConfigError(f"{prefix}.digest_file", "set digest_env or digest_file, not both")
        return settings

    def credentials(
        self, environ: Mapping[str, str] | None = None, *, prefix: str = "zookeeper"
    ) -> DigestCredentials | None:
        """Read the digest identity, or None when none is configured.

        Error messages name the key and the source, never the secret.
        """
        if self.digest_env:
            key = f"{prefix}.digest_env"
            secret = (os.environ if environ is None else environ).get(self.digest_env)
            if not secret:
                raise ConfigError(key, f"environment variable {self.digest_env} is not set")
        elif self.digest_file:
            key = f"{prefix}.digest_file"
            try:
                secret = Path(self.digest_file).read_text(encoding="utf-8").strip()
            except OSError as exc:
                raise ConfigError(key, f"cannot read {self.digest_file}: {exc.strerror}") from None
        else:
            return None
        user, sep, password = secret.partition(":")
        if not sep or not user or not password:
            raise ConfigError(key, "the secret must have the form 'user:password'")
        return DigestCredentials(user=user, password=password)


def _from_environ(environ: Mapping[str, str], prefix: str, keys: tuple[str, ...]) -> dict[str, str]:
    """``NETDISCO_ZOOKEEPER_SESSION_TIMEOUT=4`` and the like, as text."""
    names = {key: f"NETDISCO_{prefix.upper()}_{key.upper()}" for key in keys}
    return {key: environ[name] for key, name in names.items() if name in environ}


def _optional_str(value: Any, key: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(key, f"must be a non-empty string, not {value!r}")
    return value.strip()


def _env_name(value: Any, key: str) -> str | None:
    name = _optional_str(value, key)
    if name is not None and not _ENV_NAME.fullmatch(name):
        raise ConfigError(key, f"{name!r} is not a valid environment variable name")
    return name


def _seconds(value: float, key: str) -> float:
    if value <= 0:
        raise ConfigError(key, f"must be a positive number of seconds, not {value!r}")
    return value


def _znode_path(value: str, key: str) -> str:
    """Check an absolute znode path: no empty, '.' or '..' components."""
    parts = value.split("/")
    if not value.startswith("/") or value == "/" or any(p in ("", ".", "..") for p in parts[1:]):
        raise ConfigError(key, f"{value!r} is not an absolute znode path like '/netdiscovery'")
    return value


def _hosts(value: Any, key: str) -> str:
    """Check 'h1:2181,h2:2181/chroot' the way kazoo will read it."""
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(key, f"must be a non-empty string like '127.0.0.1:2181', not {value!r}")
    hosts, slash, chroot = value.strip().partition("/")
    if slash:
        _znode_path(slash + chroot, key)
    for entry in hosts.split(","):
        try:
            parsed = urllib.parse.urlsplit("zk://" + entry.strip())
            port = parsed.port
        except ValueError:
            parsed, port = None, None
        if parsed is None or not parsed.hostname or (port is not None and port < 1):
            raise ConfigError(key, f"{entry.strip()!r} is not 'host' or 'host:port'")
    return value.strip()


_TYPES = field_types(ZooKeeperSettings)
_DURATIONS = ("session_timeout", "audit_interval", "resync_interval", "tombstone_max_age")
