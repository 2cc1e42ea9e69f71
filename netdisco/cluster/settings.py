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
from dataclasses import MISSING, dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from kazoo.security import ACL, make_acl, make_digest_acl

from netdisco.cluster.contract import DEFAULT_ROOT, TOMBSTONE_MAX_AGE
from netdisco.exceptions import ConfigError
from netdisco.schema import Section, Source, from_environ, load, positive, setting
from netdisco.values import convert

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


def _znode_path(value: str) -> str | None:
    """An absolute znode path: no empty, '.' or '..' components."""
    parts = value.split("/")
    if not value.startswith("/") or value == "/" or any(p in ("", ".", "..") for p in parts[1:]):
        return f"{value!r} is not an absolute znode path like '/netdiscovery'"
    return None


def _hosts(value: str) -> str | None:
    """'h1:2181,h2:2181/chroot', checked the way kazoo will read it."""
    hosts, slash, chroot = value.partition("/")
    if slash and _znode_path(slash + chroot):
        return _znode_path(slash + chroot)
    for entry in hosts.split(","):
        try:
            parsed = urllib.parse.urlsplit("zk://" + entry.strip())
            port = parsed.port
        except ValueError:
            parsed, port = None, None
        if parsed is None or not parsed.hostname or (port is not None and port < 1):
            return f"{entry.strip()!r} is not 'host' or 'host:port'"
    return None


def _env_name(name: str) -> str | None:
    ok = _ENV_NAME.fullmatch(name)
    return None if ok else f"{name!r} is not a valid environment variable name"


def _seconds(value: float) -> str | None:
    return (
        None if positive(value) is None else f"must be a positive number of seconds, not {value!r}"
    )


def _text(key: str, value: Any) -> str:
    """A string with its blanks trimmed; an empty one is refused."""
    text: str = convert(key, value, str, text=False).strip()
    if not text:
        raise ConfigError(key, f"must be a non-empty string, not {value!r}")
    return text


def _zk(default: Any, doc: str, **more: Any) -> Any:
    return setting(default, section="zookeeper", doc=doc, **more)


@dataclass(frozen=True, kw_only=True)
class ZooKeeperSettings(Section):
    """Where engines register and monitors look; defaults live here and nowhere else."""

    PREFIX: ClassVar[str] = "zookeeper."

    hosts: str = _zk(
        MISSING,
        "'host:port,...' of the ensemble; a /chroot suffix is honoured",
        parse=_text,
        check=_hosts,
        required="is required (e.g. '127.0.0.1:2181')",
    )
    root: str = _zk(DEFAULT_ROOT, "znode the engines register under", check=_znode_path)
    session_timeout: float = _zk(
        10.0, "seconds a lost engine's session outlives it", check=_seconds
    )
    digest_env: str | None = _zk(
        None, "variable holding the digest identity 'user:password'", parse=_text, check=_env_name
    )
    digest_file: str | None = _zk(None, "file holding the digest identity", parse=_text)
    audit_interval: float = _zk(
        5.0, "engine: seconds between re-checks of its node", check=_seconds
    )
    resync_interval: float = _zk(30.0, "monitor: seconds between full re-reads", check=_seconds)
    tombstone_max_age: float = _zk(
        TOMBSTONE_MAX_AGE, "seconds before tombstones are removed", check=_seconds
    )

    def check(self) -> None:
        if self.digest_env and self.digest_file:
            raise ConfigError("zookeeper.digest_file", "set digest_env or digest_file, not both")

    @classmethod
    def from_mapping(
        cls,
        data: Mapping[str, Any],
        *,
        environ: Mapping[str, str] | None = None,
        keys: tuple[str, ...] = ENGINE_KEYS,
    ) -> ZooKeeperSettings:
        """Validate a ``[zookeeper]`` table; a ``ConfigError`` names the bad key.

        With ``environ``, ``NETDISCO_ZOOKEEPER_<KEY>`` variables override the table.
        ``keys`` are the keys this table may hold (``ENGINE_KEYS``, ``MONITOR_KEYS``).
        """
        sources = [Source(data, text=False)]
        if environ is not None:
            sources.append(from_environ(cls, environ, "NETDISCO_{KEY}", name="{key}", keys=keys))
        return load(cls, *sources, keys=keys)

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
