"""The monitor's settings: TOML file, then ``NETDISCO_MONITOR_*`` variables, then flags.

Each key is ``section.key`` (``alerts.grace``); its variable is
``NETDISCO_MONITOR_ALERTS_GRACE`` (lists comma-separated). Settings are frozen
keyword-only dataclasses with their defaults in one place, and any bad value
fails at start with a :class:`~netdisco.exceptions.ConfigError` naming the key.
Secrets (SMTP credentials) are read from the variables the file names, never
from the file, and never shown by ``repr``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from monitor.settings import (
    AlertSettings,
    CallableSettings,
    CommandSettings,
    ControlSettings,
    EmailSettings,
    HttpSettings,
    JobsSettings,
    LogSettings,
    MonitorConfig,
    RuleSettings,
    WebhookSettings,
)
from netdisco.cluster.settings import MONITOR_KEYS, ZooKeeperSettings
from netdisco.exceptions import ConfigError
from netdisco.schema import Section, Source, from_environ, load, loadable
from netdisco.values import is_loopback, read_secret, read_toml

__all__ = [
    "AlertSettings",
    "CallableSettings",
    "CommandSettings",
    "ControlSettings",
    "EmailSettings",
    "HttpSettings",
    "LogSettings",
    "MonitorConfig",
    "RuleSettings",
    "WebhookSettings",
    "ZooKeeperSettings",
    "load_config",
    "schema",
]

ENV_PREFIX = "NETDISCO_MONITOR_"

#: section -> its settings class; a hook section (and ``[control]``) is optional
SECTIONS: dict[str, type[Section]] = {
    "zookeeper": ZooKeeperSettings,
    "http": HttpSettings,
    "alerts": AlertSettings,
    "email": EmailSettings,
    "webhook": WebhookSettings,
    "command": CommandSettings,
    "callable": CallableSettings,
    "control": ControlSettings,
    "rules": RuleSettings,
    "log": LogSettings,
    "jobs": JobsSettings,
}
#: secrets read from the variables other keys name: section -> field -> its key
SECRETS = {
    "email": {"username": "username_env", "password": "password_env"},
    "control": {
        "engine_token": "token_env",
        "token": "monitor_token_env",
        "deploy_token": "deploy_token_env",
    },
}

Raw = dict[str, dict[str, Any]]


def schema() -> dict[str, tuple[str, ...]]:
    """The keys each section may hold (what monitor.toml documents)."""
    return {s: MONITOR_KEYS if s == "zookeeper" else loadable(c) for s, c in SECTIONS.items()}


def load_config(
    path: Path | None = None,
    *,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> MonitorConfig:
    """Read, merge and check every setting; ``overrides`` maps ``"section.key"`` to values."""
    environ = os.environ if env is None else env
    layers = _Layers(_read_toml(path) if path is not None else {}, environ, overrides or {})
    zk = layers.load("zookeeper")
    http = layers.load("http")
    control = layers.optional("control")
    if control is not None:
        _check_exposure(control, http.host)
    return MonitorConfig(
        zookeeper=zk,
        http=http,
        alerts=layers.load("alerts", grace=zk.session_timeout + 5.0),
        email=layers.optional("email"),
        webhook=layers.optional("webhook"),
        command=layers.optional("command"),
        callable=layers.optional("callable"),
        control=control,
        rules=layers.load("rules"),
        log=layers.load("log"),
        jobs=layers.load("jobs"),
    )


def _read_toml(path: Path) -> Raw:
    data = read_toml(path, key="--config")
    for section, table in data.items():
        if section not in SECTIONS:
            raise ConfigError(section, f"unknown section; known: {', '.join(SECTIONS)}")
        if not isinstance(table, dict):
            raise ConfigError(section, "must be a table ([section])")
    return data


class _Layers:
    """The file, the ``NETDISCO_MONITOR_*`` variables and the flags, section by section."""

    def __init__(self, raw: Raw, env: Mapping[str, str], overrides: Mapping[str, Any]) -> None:
        self.raw, self.env = raw, env
        self.flags: Raw = {}
        for dotted, value in overrides.items():
            section, _, key = dotted.partition(".")
            if section not in SECTIONS:
                raise ConfigError(section, f"unknown section; known: {', '.join(SECTIONS)}")
            if value is not None:
                self.flags.setdefault(section, {})[key] = value

    def sources(self, section: str) -> tuple[Source, ...]:
        keys = schema()[section]
        variables = from_environ(
            SECTIONS[section], self.env, ENV_PREFIX + "{KEY}", name="{key}", keys=keys
        )
        return Source(self.raw.get(section, {})), variables, Source(self.flags.get(section, {}))

    def load(self, section: str, **given: Any) -> Any:
        cls = SECTIONS[section]
        settings = load(cls, *self.sources(section), keys=schema()[section], given=given)
        secrets = SECRETS.get(section)
        if not secrets:
            return settings
        read = {name: _secret(cls, settings, key, self.env) for name, key in secrets.items()}
        return load(cls, base=settings, given=read)

    def optional(self, section: str) -> Any:
        """A hook section's settings, or None when no source mentions it."""
        present = section in self.raw or any(s.values for s in self.sources(section)[1:])
        return self.load(section) if present else None


def _secret(cls: type[Section], settings: Any, key: str, env: Mapping[str, str]) -> str | None:
    variable = getattr(settings, key)
    return None if variable is None else read_secret(cls.PREFIX + key, variable, env)


def _check_exposure(control: ControlSettings, host: str) -> None:
    """Control through the monitor; without its own token only on a loopback address."""
    if control.token is None and not is_loopback(host):
        raise ConfigError(
            "control.monitor_token_env",
            f"the dashboard's control routes would be served on {host!r}, which is not a "
            "loopback address, without a token; name the variable that holds one, or bind "
            "http.host to 127.0.0.1",
        )
