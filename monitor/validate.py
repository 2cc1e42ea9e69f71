"""Checks that turn typed config tables into settings, naming the key on any error.

Each function takes one section's values (already of the right Python type,
see :mod:`monitor.config`) and returns its frozen settings object, so a typo
in ``monitor.toml`` stops the daemon at start instead of at the first alert.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from monitor.events import EventType
from monitor.settings import (
    AlertSettings,
    CallableSettings,
    CommandSettings,
    ControlSettings,
    EmailSettings,
    HttpSettings,
    WebhookSettings,
)
from netdisco.cluster.settings import MONITOR_KEYS, ZooKeeperSettings
from netdisco.exceptions import ConfigError
from netdisco.values import is_loopback

_TARGET = re.compile(r"^[A-Za-z_][\w.]*[:.][A-Za-z_]\w*$")
_LEVELS = ("debug", "info", "warning", "error")


def _positive(key: str, value: float, *, zero_ok: bool = False) -> float:
    if value < 0 or (value == 0 and not zero_ok):
        raise ConfigError(key, f"must be {'>= 0' if zero_ok else '> 0'}, not {value}")
    return value


def _events(
    key: str, names: Iterable[str] | None, default: frozenset[EventType]
) -> frozenset[EventType]:
    if names is None:
        return default
    known = {e.value for e in EventType}
    bad = [n for n in names if n not in known]
    if bad:
        raise ConfigError(key, f"unknown event {bad[0]!r}; known: {', '.join(sorted(known))}")
    return frozenset(EventType(n) for n in names)


def _port(key: str, value: int) -> int:
    if not 0 <= value <= 65535:
        raise ConfigError(key, f"must be a TCP port (0-65535), not {value}")
    return value


def zookeeper(values: Mapping[str, Any]) -> ZooKeeperSettings:
    if not values.get("hosts"):
        raise ConfigError("zookeeper.hosts", "is required (--zk HOSTS, or [zookeeper] hosts)")
    return ZooKeeperSettings.from_mapping(values, keys=MONITOR_KEYS)


def http(values: Mapping[str, Any]) -> HttpSettings:
    recent = values.get("recent_events", 500)
    if recent < 1:
        raise ConfigError("http.recent_events", f"must be >= 1, not {recent}")
    return HttpSettings(
        host=values.get("host", "127.0.0.1"),
        port=_port("http.port", values.get("port", 8316)),
        recent_events=recent,
        poll_status=_positive("http.poll_status", values.get("poll_status", 5.0), zero_ok=True),
    )


def alerts(values: Mapping[str, Any], session_timeout: float) -> AlertSettings:
    floats = {}
    for key in (
        "batch_window",
        "max_age",
        "retry_initial",
        "retry_max",
        "hook_timeout",
        "leave_window",
    ):
        if key in values:
            floats[key] = _positive(f"alerts.{key}", values[key], zero_ok=key == "batch_window")
    state_file = values.get("state_file")
    if state_file is not None and not Path(state_file).expanduser().parent.is_dir():
        raise ConfigError("alerts.state_file", f"directory of {state_file!r} does not exist")
    return AlertSettings(
        grace=_positive("alerts.grace", values.get("grace", session_timeout + 5.0), zero_ok=True),
        state_file=Path(state_file).expanduser() if state_file else None,
        offline_events=_events(
            "alerts.offline_events",
            values.get("offline_events"),
            frozenset({EventType.ENGINE_LOST, EventType.CLUSTER_EMPTY}),
        ),
        **floats,
    )


def _credential(key: str, variable: str | None, env: Mapping[str, str]) -> str | None:
    if variable is None:
        return None
    if variable not in env:
        raise ConfigError(key, f"names the variable {variable!r}, which is not set")
    return env[variable]


def email(values: Mapping[str, Any], env: Mapping[str, str]) -> EmailSettings:
    for key in ("sender", "to"):
        if not values.get(key):
            raise ConfigError(f"email.{key}", "is required when [email] is present")
    if values.get("starttls") and values.get("tls"):
        raise ConfigError("email.tls", "choose either tls (implicit) or starttls, not both")
    for address in [values["sender"], *values["to"]]:
        if "@" not in address:
            raise ConfigError("email.to" if address != values["sender"] else "email.sender",
                              f"{address!r} is not an e-mail address")  # fmt: skip
    default = frozenset({EventType.ENGINE_LOST, EventType.CLUSTER_EMPTY})
    return EmailSettings(
        sender=values["sender"],
        to=tuple(values["to"]),
        host=values.get("host", "127.0.0.1"),
        port=_port("email.port", values.get("port", 25)),
        starttls=values.get("starttls", False),
        tls=values.get("tls", False),
        username=_credential("email.username_env", values.get("username_env"), env),
        password=_credential("email.password_env", values.get("password_env"), env),
        events=_events("email.events", values.get("events"), default),
        subject_prefix=values.get("subject_prefix", "[netdisco]"),
    )


def webhook(values: Mapping[str, Any]) -> WebhookSettings:
    url = values.get("url", "")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ConfigError("webhook.url", f"must be an http(s) URL, not {url!r}")
    lost = frozenset({EventType.ENGINE_LOST})
    return WebhookSettings(url=url, events=_events("webhook.events", values.get("events"), lost))


def command(values: Mapping[str, Any]) -> CommandSettings:
    argv = values.get("argv") or []
    if not argv:
        raise ConfigError("command.argv", "is required: the program and its arguments")
    return CommandSettings(
        argv=tuple(argv),
        events=_events("command.events", values.get("events"), frozenset({EventType.ENGINE_LOST})),
        timeout=_positive("command.timeout", values.get("timeout", 10.0)),
    )


def target(values: Mapping[str, Any]) -> CallableSettings:
    path = values.get("target", "")
    if not _TARGET.match(path):
        raise ConfigError("callable.target", f"must be 'package.module:function', not {path!r}")
    lost = frozenset({EventType.ENGINE_LOST})
    return CallableSettings(
        target=path, events=_events("callable.events", values.get("events"), lost)
    )


def control(values: Mapping[str, Any], env: Mapping[str, str], host: str) -> ControlSettings:
    """Control through the monitor; without its own token only on a loopback address."""
    token = _credential("control.monitor_token_env", values.get("monitor_token_env"), env)
    if token is None and not is_loopback(host):
        raise ConfigError(
            "control.monitor_token_env",
            f"the dashboard's control routes would be served on {host!r}, which is not a "
            "loopback address, without a token; name the variable that holds one, or bind "
            "http.host to 127.0.0.1",
        )
    if token is not None and not token.strip():
        raise ConfigError("control.monitor_token_env", "the variable it names is empty")
    return ControlSettings(
        engine_token=_credential("control.token_env", values.get("token_env"), env),
        token=token,
        timeout=_positive("control.timeout", values.get("timeout", 5.0)),
    )


def level(value: str) -> str:
    if value.lower() not in _LEVELS:
        raise ConfigError("log.level", f"must be one of {', '.join(_LEVELS)}, not {value!r}")
    return value.lower()
