"""The engine's configuration file: ``[engine]``, ``[zookeeper]`` and ``[[spiders]]``.

Everything is validated when the file is read, so that ``netdisco engine --config``
fails at start with the key named (``spiders[1].settings.concurrency``), never
half-way through a crawl. Engine keys can be overridden from the environment
(``NETDISCO_ENGINE_<KEY>``) and the command line; spider settings take
``NETDISCO_<NAME>`` over the file. The control token is read from the variable
that ``token_env`` names and is kept out of ``repr`` so it cannot leak into logs.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from netdisco.crawl import settings as crawl_settings
from netdisco.crawl.settings import Settings
from netdisco.engine.schedules import Schedule, parse_schedule
from netdisco.exceptions import ConfigError
from netdisco.values import check_keys, convert, field_types, read_toml
from netdisco.values import is_loopback as is_loopback  # re-exported: callers import it here

DEFAULT_PORT = 8715


@dataclass(frozen=True, kw_only=True)
class EngineSettings:
    """How one engine identifies itself and serves HTTP; durations in seconds."""

    id: str | None = None  # None: derived from host name and port
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT  # 0 picks a free port (tests)
    advertise: str | None = None  # host written into status_url
    token_env: str | None = "NETDISCO_TOKEN"
    token: str | None = field(default=None, repr=False)
    http: bool = True  # serve the HTTP endpoint at all
    control: bool = True  # accept POST control routes
    max_body: int = 1024 * 1024  # largest accepted request body, bytes
    status_cache: float = 0.1  # seconds a rendered /spiders answer may be reused
    api_process: bool = False  # serve HTTP from a child process (polling costs the crawl nothing)
    stop_deadline: float | None = None  # None: each spider's own settings.stop_deadline
    spider_modules: tuple[str, ...] = ()  # modules POST /netdiscovery/spiders may load from

    def __post_init__(self) -> None:
        _validate_engine(self)

    @property
    def advertised_host(self) -> str:
        """The host other machines should use to reach this engine."""
        return self.advertise or self.host

    def default_id(self, port: int) -> str:
        """A stable id for engines that set none: host name and port survive restarts."""
        return self.id or f"{socket.gethostname()}-{port}"


def check_exposure(s: EngineSettings) -> None:
    """Refuse unauthenticated control on an address other machines can reach."""
    if s.http and s.control and s.token is None and not is_loopback(s.host):
        raise ConfigError(
            "engine.token_env",
            f"control routes are enabled on {s.host!r}, which is not a loopback address, "
            f"but no token is set; put a token in ${s.token_env or 'NETDISCO_TOKEN'}, "
            "bind to 127.0.0.1, or set engine.control = false",
        )


def _validate_engine(s: EngineSettings) -> None:
    if s.id is not None and (not s.id or "/" in s.id):
        raise ConfigError("engine.id", f"must be a non-empty name without '/', got {s.id!r}")
    if not s.host:
        raise ConfigError("engine.host", "must not be empty")
    if not 0 <= s.port <= 65535:
        raise ConfigError("engine.port", f"must be between 0 and 65535, got {s.port!r}")
    if s.max_body <= 0:
        raise ConfigError("engine.max_body", f"must be greater than 0, got {s.max_body!r}")
    if s.status_cache < 0:
        raise ConfigError("engine.status_cache", f"must not be negative, got {s.status_cache!r}")
    if s.stop_deadline is not None and s.stop_deadline < 0:
        raise ConfigError("engine.stop_deadline", f"must not be negative, got {s.stop_deadline}")
    if s.token is not None and not s.token.strip():
        raise ConfigError("engine.token_env", "names a variable that holds an empty token")


#: every ``[engine]`` key and its declared type; the token comes only from the environment
_ENGINE_TYPES = {k: v for k, v in field_types(EngineSettings).items() if k != "token"}


@dataclass(frozen=True, kw_only=True)
class SpiderConfig:
    """One ``[[spiders]]`` entry: what to load and the setting layers over its defaults."""

    spider: str  # "FILE.py:Class" or "module:Class"
    table: Mapping[str, Any] = field(default_factory=dict)  # the entry's settings table
    environ: Mapping[str, str] = field(default_factory=dict, repr=False)  # NETDISCO_* values
    pairs: Mapping[str, str] = field(default_factory=dict)  # -s name=value
    key: str = "spiders[0]"  # where it came from, for error messages
    schedule: Schedule | None = None  # ``schedule`` (cron) or ``every``

    def __post_init__(self) -> None:
        self.settings()  # fail at load time, not when the spider starts

    def settings(self, custom: Mapping[str, Any] | None = None) -> Settings:
        """Defaults < the spider's ``custom_settings`` < file < environment < ``-s``."""
        try:
            base = crawl_settings.from_mapping(custom or {})
        except ConfigError as exc:
            raise _renamed(f"{self.spider} custom_settings.{exc.key}", exc) from None
        try:
            base = crawl_settings.from_mapping(self.table, base=base)
        except ConfigError as exc:
            raise _renamed(f"{self.key}.settings.{exc.key}", exc) from None
        try:
            base = crawl_settings.from_env(self.environ, base=base)
        except ConfigError as exc:
            raise _renamed(f"NETDISCO_{exc.key.upper()}", exc) from None
        try:
            result = crawl_settings.from_mapping(self.pairs, base=base)
        except ConfigError as exc:
            raise _renamed(f"-s {exc.key}", exc) from None
        try:
            crawl_settings.check_recrawl(result)  # complete now: what is asked needs a store
        except ConfigError as exc:
            raise _renamed(f"{self.key}.settings.{exc.key}", exc) from None
        return result


@dataclass(frozen=True, kw_only=True)
class EngineConfig:
    """A whole engine configuration file, validated."""

    engine: EngineSettings = field(default_factory=EngineSettings)
    zookeeper: Mapping[str, Any] | None = None  # raw table; registry validates it
    spiders: tuple[SpiderConfig, ...] = ()


def engine_settings(
    table: Mapping[str, Any],
    *,
    environ: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> EngineSettings:
    """``[engine]`` under ``NETDISCO_ENGINE_<KEY>`` under ``overrides`` (command line)."""
    env = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    for name, raw in table.items():
        values[name] = _engine_value(name, raw, text=False)
    for name in _ENGINE_TYPES:
        text = env.get(f"NETDISCO_ENGINE_{name.upper()}")
        if text is not None:
            values[name] = _engine_value(name, text)
    for name, raw in (overrides or {}).items():
        if raw is not None:
            values[name] = _engine_value(name, raw, text=False)
    token_env = values.get("token_env", EngineSettings.token_env)
    token = env.get(token_env) if token_env else None
    return EngineSettings(**values, token=token)


def _engine_value(name: str, raw: Any, *, text: bool = True) -> Any:
    kind = _ENGINE_TYPES.get(name)
    if kind is None:
        known = ", ".join(sorted(_ENGINE_TYPES))
        raise ConfigError(f"engine.{name}", f"unknown key (known keys: {known})")
    return convert(f"engine.{name}", raw, kind, text=text)


def spider_configs(
    entries: Any,
    *,
    environ: Mapping[str, str] | None = None,
    pairs: Mapping[str, str] | None = None,
) -> tuple[SpiderConfig, ...]:
    """``[[spiders]]`` entries, each setting validated and named by its position."""
    env = os.environ if environ is None else environ
    if not isinstance(entries, list):
        raise ConfigError("spiders", f"expected an array of tables ([[spiders]]), got {entries!r}")
    spider_env = {k: v for k, v in env.items() if k.startswith("NETDISCO_")}
    return tuple(
        _spider_config(f"spiders[{index}]", entry, spider_env, pairs or {})
        for index, entry in enumerate(entries)
    )


_SPIDER_KEYS = ("spider", "settings", "schedule", "every")


def _spider_config(
    key: str, entry: Any, environ: Mapping[str, str], pairs: Mapping[str, str]
) -> SpiderConfig:
    if not isinstance(entry, dict):
        raise ConfigError(key, f"expected a table, got {entry!r}")
    check_keys(key, entry, _SPIDER_KEYS)
    ref = entry.get("spider")
    if not isinstance(ref, str) or ":" not in ref:
        raise ConfigError(
            f"{key}.spider", f"expected 'FILE.py:Class' or 'module:Class', got {ref!r}"
        )
    table = entry.get("settings", {})
    if not isinstance(table, dict):
        raise ConfigError(f"{key}.settings", f"expected a table, got {table!r}")
    schedule = parse_schedule(entry.get("schedule"), entry.get("every"), key=key)
    return SpiderConfig(
        spider=ref, table=table, environ=environ, pairs=pairs, key=key, schedule=schedule
    )


def _renamed(key: str, exc: ConfigError) -> ConfigError:
    """The same error, naming the key the user actually wrote."""
    return ConfigError(key, str(exc).removeprefix(f"{exc.key}: "))


def load_config(
    path: str | Path,
    *,
    environ: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
    pairs: Mapping[str, str] | None = None,
) -> EngineConfig:
    """Read and validate an engine TOML file; every error names its key."""
    data = read_toml(path, key="config")
    return parse_config(data, environ=environ, overrides=overrides, pairs=pairs)


def parse_config(
    data: Mapping[str, Any],
    *,
    environ: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
    pairs: Mapping[str, str] | None = None,
) -> EngineConfig:
    """Validate an already parsed configuration mapping."""
    unknown = set(data) - {"engine", "zookeeper", "spiders"}
    if unknown:
        raise ConfigError(sorted(unknown)[0], "unknown section (known: engine, zookeeper, spiders)")
    for section in ("engine", "zookeeper"):
        if section in data and not isinstance(data[section], dict):
            raise ConfigError(section, f"expected a table, got {data[section]!r}")
    engine = engine_settings(data.get("engine", {}), environ=environ, overrides=overrides)
    spiders = spider_configs(data.get("spiders", []), environ=environ, pairs=pairs)
    return EngineConfig(engine=engine, zookeeper=data.get("zookeeper"), spiders=spiders)
