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

from monitor import validate
from monitor.settings import (
    AlertSettings,
    CallableSettings,
    CommandSettings,
    ControlSettings,
    EmailSettings,
    HttpSettings,
    MonitorConfig,
    WebhookSettings,
)
from netdisco.cluster.settings import ZooKeeperSettings
from netdisco.exceptions import ConfigError
from netdisco.values import convert, read_toml

__all__ = [
    "AlertSettings",
    "CallableSettings",
    "CommandSettings",
    "ControlSettings",
    "EmailSettings",
    "HttpSettings",
    "MonitorConfig",
    "WebhookSettings",
    "ZooKeeperSettings",
    "load_config",
]

ENV_PREFIX = "NETDISCO_MONITOR_"

# section -> key -> kind; kinds: str, int, float, bool, list (of str)
_SCHEMA: dict[str, dict[str, str]] = {
    "zookeeper": {"hosts": "str", "root": "str", "session_timeout": "float",
                  "resync_interval": "float", "digest_env": "str", "digest_file": "str",
                  "tombstone_max_age": "float"},
    "http": {"host": "str", "port": "int", "recent_events": "int", "poll_status": "float"},
    "alerts": {"grace": "float", "state_file": "str", "batch_window": "float",
               "max_age": "float", "retry_initial": "float", "retry_max": "float",
               "hook_timeout": "float", "offline_events": "list", "leave_window": "float"},
    "email": {"host": "str", "port": "int", "starttls": "bool", "tls": "bool", "sender": "str",
              "to": "list", "username_env": "str", "password_env": "str", "events": "list",
              "subject_prefix": "str"},
    "webhook": {"url": "str", "events": "list"},
    "command": {"argv": "list", "events": "list", "timeout": "float"},
    "callable": {"target": "str", "events": "list"},
    "control": {"token_env": "str", "monitor_token_env": "str", "timeout": "float"},
    "log": {"json": "bool", "level": "str"},
}  # fmt: skip

Raw = dict[str, dict[str, Any]]


def load_config(
    path: Path | None = None,
    *,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> MonitorConfig:
    """Read, merge and check every setting; ``overrides`` maps ``"section.key"`` to values."""
    raw = _read_toml(path) if path is not None else {}
    _check_keys(raw)
    _merge(raw, _from_env(os.environ if env is None else env))
    _merge(raw, _from_flags(overrides or {}))
    values = {
        s: {k: _typed(f"{s}.{k}", v, _SCHEMA[s][k]) for k, v in t.items()} for s, t in raw.items()
    }
    return _build(values, os.environ if env is None else env)


def _read_toml(path: Path) -> Raw:
    data = read_toml(path, key="--config")
    for section, table in data.items():
        if not isinstance(table, dict):
            raise ConfigError(section, "must be a table ([section])")
    return data


def _check_keys(raw: Raw) -> None:
    for section, table in raw.items():
        if section not in _SCHEMA:
            raise ConfigError(section, f"unknown section; known: {', '.join(_SCHEMA)}")
        for key in table:
            if key not in _SCHEMA[section]:
                raise ConfigError(f"{section}.{key}", "unknown key")


def _from_env(env: Mapping[str, str]) -> Raw:
    raw: Raw = {}
    for section, keys in _SCHEMA.items():
        for key in keys:
            name = f"{ENV_PREFIX}{section}_{key}".upper()
            if name in env:
                raw.setdefault(section, {})[key] = env[name]
    return raw


def _from_flags(overrides: Mapping[str, Any]) -> Raw:
    raw: Raw = {}
    for dotted, value in overrides.items():
        section, _, key = dotted.partition(".")
        if value is not None:
            raw.setdefault(section, {})[key] = value
    _check_keys(raw)
    return raw


def _merge(base: Raw, top: Raw) -> None:
    for section, table in top.items():
        base.setdefault(section, {}).update(table)


_KINDS: dict[str, Any] = {
    "str": str,
    "int": int,
    "float": float,
    "bool": bool,
    "list": tuple[str, ...],
}


def _typed(key: str, value: Any, kind: str) -> Any:
    """One value as its kind: text (environment, flags, TOML strings) is parsed."""
    return convert(key, value, _KINDS[kind])


def _build(values: Raw, env: Mapping[str, str]) -> MonitorConfig:
    zk = validate.zookeeper(values.get("zookeeper", {}))
    log = values.get("log", {})
    http = validate.http(values.get("http", {}))
    control = values.get("control")
    return MonitorConfig(
        zookeeper=zk,
        http=http,
        alerts=validate.alerts(values.get("alerts", {}), zk.session_timeout),
        email=validate.email(values["email"], env) if "email" in values else None,
        webhook=validate.webhook(values["webhook"]) if "webhook" in values else None,
        command=validate.command(values["command"]) if "command" in values else None,
        callable=validate.target(values["callable"]) if "callable" in values else None,
        control=None if control is None else validate.control(control, env, http.host),
        log_json=log.get("json"),
        log_level=validate.level(log.get("level", "info")),
    )
