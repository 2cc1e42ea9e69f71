"""The ``[zookeeper]`` settings of an engine, and the digest identity they name.

Settings hold only *where* the digest secret lives (an environment variable or a
file), never the secret itself, so a settings object can be logged or shown
safely. The secret is read once, when a ``Registration`` is built, and a missing
or malformed one fails at start with the offending key in the message.
"""

from __future__ import annotations

import math
import os
import re
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kazoo.security import ACL, make_acl, make_digest_acl

from netdisco.exceptions import ConfigError

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_KEYS = (
    "hosts",
    "root",
    "session_timeout",
    "digest_env",
    "digest_file",
    "audit_interval",
    "tombstone_max_age",
)
_SECONDS = ("session_timeout", "audit_interval", "tombstone_max_age")


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
    """Where and how an engine registers; defaults live here and nowhere else."""

    hosts: str
    root: str = "/netdiscovery"
    session_timeout: float = 10.0
    digest_env: str | None = None
    digest_file: str | None = None
    audit_interval: float = 5.0
    tombstone_max_age: float = 86400.0  # own tombstones older than this go at start

    @classmethod
    def from_mapping(
        cls,
        data: Mapping[str, Any],
        *,
        prefix: str = "zookeeper",
        environ: Mapping[str, str] | None = None,
    ) -> ZooKeeperSettings:
        """Validate a ``[zookeeper]`` table; a ``ConfigError`` names the bad key.

        With ``environ``, ``NETDISCO_ZOOKEEPER_<KEY>`` variables override the table.
        """
        if environ is not None:
            data = {**data, **_from_environ(environ, prefix)}
        for key in data:
            if key not in _KEYS:
                raise ConfigError(
                    f"{prefix}.{key}", f"unknown key; expected one of {', '.join(_KEYS)}"
                )
        if "hosts" not in data:
            raise ConfigError(f"{prefix}.hosts", "is required (e.g. '127.0.0.1:2181')")
        settings = cls(
            hosts=_hosts(data["hosts"], f"{prefix}.hosts"),
            root=_root(data.get("root", cls.root), f"{prefix}.root"),
            session_timeout=_seconds(
                data.get("session_timeout", cls.session_timeout), f"{prefix}.session_timeout"
            ),
            digest_env=_env_name(data.get("digest_env"), f"{prefix}.digest_env"),
            digest_file=_optional_str(data.get("digest_file"), f"{prefix}.digest_file"),
            audit_interval=_seconds(
                data.get("audit_interval", cls.audit_interval), f"{prefix}.audit_interval"
            ),
            tombstone_max_age=_seconds(
                data.get("tombstone_max_age", cls.tombstone_max_age), f"{prefix}.tombstone_max_age"
            ),
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


def _from_environ(environ: Mapping[str, str], prefix: str) -> dict[str, Any]:
    """``NETDISCO_ZOOKEEPER_SESSION_TIMEOUT=4`` and the like; numbers parsed here."""
    found: dict[str, Any] = {}
    for key in _KEYS:
        name = f"NETDISCO_{prefix.upper()}_{key.upper()}"
        if name not in environ:
            continue
        value: Any = environ[name]
        if key in _SECONDS:
            try:
                value = float(value)
            except ValueError:
                raise ConfigError(f"{prefix}.{key}", f"{name}={value!r} is not a number") from None
        found[key] = value
    return found


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


def _seconds(value: Any, key: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(key, f"must be a number of seconds, not {value!r}")
    if not math.isfinite(value) or value <= 0:
        raise ConfigError(key, f"must be a positive number of seconds, not {value!r}")
    return float(value)


def _znode_path(value: str, key: str) -> str:
    """Check an absolute znode path: no empty, '.' or '..' components."""
    parts = value.split("/")
    if not value.startswith("/") or value == "/" or any(p in ("", ".", "..") for p in parts[1:]):
        raise ConfigError(key, f"{value!r} is not an absolute znode path like '/netdiscovery'")
    return value


def _root(value: Any, key: str) -> str:
    if not isinstance(value, str):
        raise ConfigError(key, f"must be a string, not {value!r}")
    return _znode_path(value, key)


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
