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
import re
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import urlsplit

from netdisco.cluster.ticks import Schedule, parse_schedule
from netdisco.crawl import settings as crawl_settings
from netdisco.crawl.arguments import check_args
from netdisco.crawl.settings import Settings
from netdisco.exceptions import ConfigError
from netdisco.schema import (
    Section,
    Source,
    from_environ,
    load,
    loadable,
    non_negative,
    positive,
    setting,
)
from netdisco.schema import port as port_check
from netdisco.values import check_keys, read_secret, read_toml
from netdisco.values import is_loopback as is_loopback  # re-exported: callers import it here

DEFAULT_PORT = 8715
#: ``max_jobs`` of an engine read from a file (``netdisco engine``): a cluster's engine
#: takes jobs; one an application embeds (``EngineSettings()``) takes none unless asked
FILE_MAX_JOBS = 4


def _engine_id(value: str) -> str | None:
    ok = value and "/" not in value
    return None if ok else f"must be a non-empty name without '/', got {value!r}"


def _labels(values: tuple[str, ...]) -> str | None:
    bad = [v for v in values if not re.fullmatch(r"[\w.-]+=[\w.-]+", v)]
    return f"expected key=value of letters, digits, '.', '_', '-', got {bad[0]!r}" if bad else None


def _base_url(value: str | None) -> str | None:
    """An ``http(s)://host[:port][/prefix]`` URL: no query, fragment or credentials."""
    if value is None:
        return None
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 - raises on a port that is not a number or out of range
    except ValueError as exc:
        return f"expected http(s)://HOST[:PORT][/PREFIX], got {value!r}: {exc}"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return f"expected http(s)://HOST[:PORT][/PREFIX], got {value!r}"
    if parts.query or parts.fragment or parts.username or parts.password:
        return f"expected no query, fragment or credentials, got {value!r}"
    return None


def _engine(default: Any, doc: str, **more: Any) -> Any:
    return setting(default, section="engine", doc=doc, **more)


@dataclass(frozen=True, kw_only=True)
class EngineSettings(Section):
    """How one engine identifies itself and serves HTTP; durations in seconds."""

    PREFIX: ClassVar[str] = "engine."
    RENAMED: ClassVar[Mapping[str, str]] = {
        "stop_deadline": "removed: stop_deadline is a spider setting; set it for every spider "
        "with -s stop_deadline=N or NETDISCO_STOP_DEADLINE, or in [[spiders]] settings",
    }

    id: str | None = _engine(None, "the engine's name (none: host name and port)", check=_engine_id)
    host: str = _engine(
        "127.0.0.1",
        "address the HTTP endpoint binds to",
        check=lambda h: None if h else "must not be empty",
    )
    port: int = _engine(DEFAULT_PORT, "HTTP port (0: any free one)", check=port_check)
    advertise: str | None = _engine(None, "host written into status_url (none: host)")
    advertise_url: str | None = _engine(
        None,
        "base URL other machines reach the engine's routes at: scheme, host, port and "
        "the path prefix an application mounts them under, e.g. http://10.0.0.5:8080/crawler "
        "(none: http://ADVERTISE:PORT)",
        check=_base_url,
    )
    token_env: str | None = _engine("NETDISCO_TOKEN", "variable that holds the control token")
    token: str | None = _engine(
        None, "the control token (read from token_env)", loaded=False, shown=False
    )
    http: bool = _engine(True, "serve the HTTP endpoint at all")
    control: bool = _engine(True, "accept POST control routes")
    max_body: int = _engine(1024 * 1024, "largest accepted request body, bytes", check=positive)
    status_cache: float = _engine(
        0.1, "seconds a rendered /spiders answer may be reused", check=non_negative
    )
    api_process: bool = _engine(False, "serve HTTP from a child process")
    loop_stall: float = _engine(
        5.0,
        "seconds without a turn of the event loop after which the engine says it is "
        "stalled (znode stalled, HTTP 503)",
        check=positive,
    )
    loop_stall_drop: float = _engine(
        60.0,
        "seconds stalled after which the engine gives up its znode, so that its leases "
        "are recovered as for a crash; it registers again when the loop is back (0: never)",
        check=non_negative,
    )
    spider_modules: tuple[str, ...] = _engine(
        (), "modules POST /netdiscovery/spiders may load spiders and middlewares from"
    )
    feeds_dir: str | None = _engine(
        None, "directory feeds asked for over HTTP are written under (none: they are refused)"
    )
    max_jobs: int = _engine(
        0,
        "jobs run at once as child processes (0: none; an engine file or netdisco engine "
        f"takes {FILE_MAX_JOBS} unless it says otherwise, an engine built in Python none)",
        check=non_negative,
    )
    labels: tuple[str, ...] = _engine(
        (), 'key=value labels jobs are placed by (on = "key=value")', check=_labels
    )
    jobs_dir: str | None = _engine(
        None,
        "where each job's log, items and spec are kept (none: "
        "$XDG_STATE_HOME or ~/.local/state, netdisco/jobs/<cluster>/<engine id>)",
    )
    job_log_max: int = _engine(
        10 * 1024 * 1024, "bytes of a job's log before it is rotated (two old ones kept)",
        check=positive,
    )  # fmt: skip
    job_items_max: int = _engine(
        1_000_000, "items a job keeps in its directory, feed or not (0: none; more are counted)",
        check=non_negative,
    )  # fmt: skip
    job_frontier: str | None = _engine(
        None, "frontier every job crawls on (a shared redis:// one lets a lost job resume)"
    )

    def check(self) -> None:
        if self.token is not None and not self.token.strip():
            raise ConfigError("engine.token_env", "names a variable that holds an empty token")

    @property
    def advertised_host(self) -> str:
        """The host other machines should use to reach this engine."""
        if self.advertise_url is not None:
            return urlsplit(self.advertise_url).hostname or self.host
        return self.advertise or self.host

    def advertised_base(self, port: int) -> str:
        """``scheme://host:port/prefix`` (no trailing slash) the engine's routes are
        reached at: ``advertise_url``, or the bound ``port`` on the advertised host."""
        if self.advertise_url is not None:
            parts = urlsplit(self.advertise_url)
            default = 443 if parts.scheme == "https" else 80
            host = parts.hostname or ""
            netloc = f"{f'[{host}]' if ':' in host else host}:{parts.port or default}"
            return f"{parts.scheme}://{netloc}{parts.path.rstrip('/')}"
        return f"http://{self.advertised_host}:{port}"

    def advertised_port(self, port: int) -> int:
        """The port other machines reach the engine at (``advertise_url``'s, or ``port``)."""
        return int(urlsplit(self.advertised_base(port)).port or port)

    @property
    def label_map(self) -> dict[str, str]:
        """``labels`` as the engine's node carries them."""
        return dict(label.split("=", 1) for label in self.labels)

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


#: every ``[engine]`` key; the token comes only from the variable ``token_env`` names
ENGINE_KEYS = loadable(EngineSettings)


@dataclass(frozen=True, kw_only=True)
class SpiderConfig:
    """One ``[[spiders]]`` entry: what to load and the setting layers over its defaults."""

    spider: str  # "FILE.py:Class" or "module:Class"
    table: Mapping[str, Any] = field(default_factory=dict)  # the entry's settings table
    environ: Mapping[str, str] = field(default_factory=dict, repr=False)  # NETDISCO_* values
    pairs: Mapping[str, str] = field(default_factory=dict)  # -s name=value
    key: str = "spiders[0]"  # where it came from, for error messages
    schedule: Schedule | None = None  # ``schedule`` (cron) or ``every``
    args: Mapping[str, str] = field(default_factory=dict)  # spider arguments (``args``)

    def __post_init__(self) -> None:
        self.settings()  # fail at load time, not when the spider starts

    def settings(self, custom: Mapping[str, Any] | None = None) -> Settings:
        """The spider's settings from every source of an engine's entry (their order:
        ``settings.PRIORITIES``)."""
        result = crawl_settings.layered(
            spider=Source(custom or {}, f"{self.spider} custom_settings.{{key}}"),
            file=Source(self.table, f"{self.key}.settings.{{key}}"),
            environment=from_environ(Settings, self.environ, "NETDISCO_{KEY}"),
            command_line=Source(self.pairs, "-s {key}"),
        )
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
    flags = {name: value for name, value in (overrides or {}).items() if value is not None}
    sources = (
        Source({"max_jobs": FILE_MAX_JOBS}, text=False),
        Source(table, text=False),
        from_environ(EngineSettings, env, "NETDISCO_{KEY}", name="{key}"),
        Source(flags, text=False),
    )
    settings = load(EngineSettings, *sources)
    variable = settings.token_env
    if variable is None or (
        variable not in env and all("token_env" not in s.values for s in sources)
    ):
        return settings  # the default variable, unset: no token (loopback only, see check_exposure)
    token = read_secret("engine.token_env", variable, env)
    return load(EngineSettings, base=settings, given={"token": token})


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
    configs, errors = [], []
    for index, entry in enumerate(entries):
        try:
            configs.append(_spider_config(f"spiders[{index}]", entry, spider_env, pairs or {}))
        except ConfigError as exc:  # every entry's problems, not the first one's only
            errors.append(exc)
    if errors:
        raise ConfigError.together(errors)
    return tuple(configs)


_SPIDER_KEYS = ("spider", "settings", "schedule", "every", "args")


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
    args = check_args(entry.get("args", {}), key=f"{key}.args.{{name}}")
    return SpiderConfig(
        spider=ref,
        table=table,
        environ=environ,
        pairs=pairs,
        key=key,
        schedule=schedule,
        args=args,
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
    errors: list[ConfigError] = []  # every section's problems at once, not one per run
    try:
        engine = engine_settings(data.get("engine", {}), environ=environ, overrides=overrides)
    except ConfigError as exc:
        errors.append(exc)
    if data.get("zookeeper") is not None:
        try:
            _zookeeper_checked(data["zookeeper"], environ)
        except ConfigError as exc:
            errors.append(exc)
    try:
        spiders = spider_configs(data.get("spiders", []), environ=environ, pairs=pairs)
    except ConfigError as exc:
        errors.append(exc)
    if errors:
        raise ConfigError.together(errors)
    return EngineConfig(engine=engine, zookeeper=data.get("zookeeper"), spiders=spiders)


def _zookeeper_checked(table: Mapping[str, Any], environ: Mapping[str, str] | None) -> None:
    """``[zookeeper]`` validated with the rest of the file (the engine validates it
    again when it is built), so that its typos are said with the others'."""
    from netdisco.cluster.settings import ZooKeeperSettings  # kazoo only when configured

    ZooKeeperSettings.from_mapping(table, environ=os.environ if environ is None else environ)
