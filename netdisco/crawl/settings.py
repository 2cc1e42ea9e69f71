"""Crawl settings: one frozen dataclass, defaults in one place.

The same names work with ``-s name=value``, in TOML and as ``NETDISCO_<NAME>``
environment variables; every value is validated here so that a bad one fails at
start with the key named, never half-way through a crawl.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import Any

from netdisco._version import __version__
from netdisco.crawl.feeds.spec import FeedSpec, parse_feeds
from netdisco.exceptions import ConfigError
from netdisco.frontiers import is_shared
from netdisco.values import convert, field_types, parse_duration, parse_strings

DEFAULT_USER_AGENT = f"netdisco/{__version__} (+https://pypi.org/project/netdiscovery/)"


@dataclass(frozen=True, kw_only=True)
class Settings:
    """How one spider crawls. Sizes in bytes, durations in seconds; 0 means no limit."""

    concurrency: int = 16
    per_host_concurrency: int = 8
    download_delay: float = 0.0
    obey_robots: bool = True
    max_pages: int = 0
    depth_limit: int = 0
    timeout: float = 30.0
    connect_timeout: float = 10.0
    retries: int = 2
    retry_backoff: float = 0.5
    retry_max_delay: float = 60.0
    max_redirects: int = 10
    max_response_size: int = 10 * 1024 * 1024
    user_agent: str = DEFAULT_USER_AGENT
    allow: tuple[str, ...] = ()
    deny: tuple[str, ...] = ()
    proxy: str | None = None
    stop_deadline: float = 10.0
    progress_interval: float = 5.0
    item_buffer: int = 256
    frontier: str = "memory"
    state_dir: str | None = None
    flush_interval: float = 0.1
    flush_items: int = 1000
    #: let ``POST .../requests`` push loopback, link-local and private-range URLs
    allow_private_targets: bool = False
    #: hosts whose scope decision and (idle) download slot are kept: about 0.5 KB each
    host_cache_size: int = 50_000
    #: origins whose parsed robots.txt is kept: about 3 KB each for a short file
    robots_cache_size: int = 5_000
    #: seconds a fetched robots.txt is trusted (RFC 9309: at most 24 h)
    robots_max_age: float = 86_400.0
    #: seconds a host with an unreachable robots.txt (5xx, timeout) waits before it is
    #: asked again; doubled after every failure up to ``robots_max_backoff``
    robots_backoff: float = 60.0
    robots_max_backoff: float = 3_600.0
    # downloader middleware (netdisco.crawl.middleware), in chain order
    default_headers: tuple[str, ...] = ()  # "Name: value"
    user_agents: tuple[str, ...] = ()
    cookies: bool = False
    proxies: tuple[str, ...] = ()
    proxy_backoff: float = 30.0
    middlewares: tuple[str, ...] = ()  # "module:Class" import paths
    # rendering in headless Chromium (netdisco.crawl.render)
    render: bool = False
    render_concurrency: int = 4
    render_wait: str = "load"  # "load", "domcontentloaded", "networkidle" or a CSS selector
    render_timeout: float = 30.0
    render_block: tuple[str, ...] = ("image", "font", "media")
    chromium: str = "/usr/bin/chromium"
    # where items go (netdisco.crawl.feeds); parsed by feeds.spec.parse_feeds
    feeds: tuple[FeedSpec, ...] = ()
    # re-crawls (netdisco.crawl.recrawl); both need a page store: state_dir or Redis
    recrawl: str = "always"  # or "conditional": revalidate with the stored ETag/Last-Modified
    age: float | None = None  # seconds: a page fetched within it is not fetched on the next run

    def __post_init__(self) -> None:
        _validate(self)

    def replace(self, **changes: Any) -> Settings:
        """A copy with some values changed (validated)."""
        return from_mapping(changes, base=self)


_FIELDS = {f.name: f for f in fields(Settings)}
_POSITIVE = (
    "concurrency",
    "per_host_concurrency",
    "timeout",
    "connect_timeout",
    "item_buffer",
    "flush_items",
    "host_cache_size",
    "robots_cache_size",
    "robots_max_age",
    "robots_backoff",
    "robots_max_backoff",
    "render_concurrency",
    "render_timeout",
)
_NON_NEGATIVE = (
    "download_delay",
    "max_pages",
    "depth_limit",
    "retries",
    "retry_backoff",
    "retry_max_delay",
    "max_redirects",
    "max_response_size",
    "stop_deadline",
    "progress_interval",
    "flush_interval",
    "proxy_backoff",
)
#: settings with structure of their own, parsed by their module
_STRUCTURED: dict[str, Callable[[str, Any], Any]] = {
    "feeds": parse_feeds,
    "age": lambda key, value: None if value is None else parse_duration(key, value),
}
RECRAWL = ("always", "conditional")
_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")


def _validate(s: Settings) -> None:
    _validate_numbers(s)
    for name in ("allow", "deny"):
        for pattern in getattr(s, name):
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ConfigError(name, f"invalid regular expression {pattern!r}: {exc}") from exc
    if not (s.frontier.startswith("memory") or is_shared(s.frontier)):
        raise ConfigError("frontier", f"expected 'memory' or a redis:// URL, got {s.frontier!r}")
    if s.state_dir is not None and is_shared(s.frontier):
        raise ConfigError(
            "state_dir", "applies to the standalone frontier; a Redis frontier keeps its state"
        )
    _validate_middleware(s)
    if s.recrawl not in RECRAWL:
        raise ConfigError("recrawl", f"expected always or conditional, got {s.recrawl!r}")
    age = s.age
    if age is not None and not (isinstance(age, int | float) and math.isfinite(age) and age > 0):
        raise ConfigError("age", f"must be a positive duration in seconds, got {age!r}")
    if not s.render_wait.strip():
        raise ConfigError("render_wait", "expected load, networkidle or a CSS selector")


def check_recrawl(s: Settings) -> None:
    """``recrawl``/``age`` need a store that outlives a run: refuse them without one.

    Checked once the settings are complete (a spider's ``custom_settings`` may ask for
    ``recrawl`` while ``-s state_dir=...`` comes later), by the crawler and the engine.
    """
    if s.state_dir is not None or is_shared(s.frontier):
        return
    for key, wanted in (("recrawl", s.recrawl != "always"), ("age", s.age is not None)):
        if wanted:
            raise ConfigError(
                key,
                "needs a state_dir or a Redis frontier: with the memory frontier nothing "
                "persists between runs, so no page is stored to revalidate or to skip",
            )


def _validate_middleware(s: Settings) -> None:
    for header in s.default_headers:
        name, sep, _ = header.partition(":")
        if not sep or not _HEADER_NAME.match(name.strip()):
            raise ConfigError("default_headers", f"expected 'Name: value', got {header!r}")
    for proxy in s.proxies:
        if not proxy.startswith(("http://", "https://")):
            raise ConfigError("proxies", f"expected an http:// or https:// URL, got {proxy!r}")
    for path in s.middlewares:
        if not path.strip() or not ("." in path or ":" in path):
            raise ConfigError("middlewares", f"expected 'module:Class', got {path!r}")
    if any(not agent.strip() for agent in s.user_agents):
        raise ConfigError("user_agents", "an empty user agent")


def _validate_numbers(s: Settings) -> None:
    for name in (*_POSITIVE, *_NON_NEGATIVE):
        if not math.isfinite(getattr(s, name)):  # NaN passes every comparison below
            raise ConfigError(name, f"must be a finite number, got {getattr(s, name)!r}")
    for name in _POSITIVE:
        if getattr(s, name) <= 0:
            raise ConfigError(name, f"must be greater than 0, got {getattr(s, name)!r}")
    for name in _NON_NEGATIVE:
        if getattr(s, name) < 0:
            raise ConfigError(name, f"must not be negative, got {getattr(s, name)!r}")


#: the declared type of every setting: the converter is chosen by it (``netdisco.values``)
_TYPES = field_types(Settings)


def _coerce(name: str, value: Any) -> Any:
    """Turn a TOML, CLI or environment value into the field's type, or say why not."""
    if name in _STRUCTURED:
        return _STRUCTURED[name](name, value)
    if _TYPES[name] == tuple[str, ...]:
        return parse_strings(name, value, split=_split_patterns)
    return convert(name, value, _TYPES[name])


def _split_patterns(text: str) -> list[str]:
    """Split a comma-separated list of regexes, keeping commas inside ``{1,3}``, ``[,;]``
    or ``(a|,)`` and escaped ones (``\\,``) in their pattern."""
    parts: list[str] = []
    current: list[str] = []
    depth, escaped = 0, False
    for char in text:
        if char == "," and not depth and not escaped:
            parts.append("".join(current))
            current = []
            continue
        if not escaped and char in "([{":
            depth += 1
        elif not escaped and char in ")]}" and depth:
            depth -= 1
        escaped = char == "\\" and not escaped
        current.append(char)
    parts.append("".join(current))
    return [part for part in parts if part]


def from_mapping(data: Mapping[str, Any], *, base: Settings | None = None) -> Settings:
    """Settings from a mapping (TOML table, ``-s`` pairs); unknown keys are errors."""
    values: dict[str, Any] = {}
    for name, raw in data.items():
        if name not in _FIELDS:
            known = ", ".join(sorted(_FIELDS))
            raise ConfigError(name, f"unknown setting (known settings: {known})")
        values[name] = _coerce(name, raw)
    return dataclasses.replace(base or Settings(), **values)


def from_env(environ: Mapping[str, str] | None = None, *, base: Settings | None = None) -> Settings:
    """Settings from ``NETDISCO_<NAME>`` variables over ``base``."""
    env = os.environ if environ is None else environ
    found = {n: env[f"NETDISCO_{n.upper()}"] for n in _FIELDS if f"NETDISCO_{n.upper()}" in env}
    return from_mapping(found, base=base)


def parse_pairs(pairs: list[str]) -> dict[str, str]:
    """``["concurrency=64", ...]`` from ``-s`` flags into a mapping."""
    result: dict[str, str] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name.strip():
            raise ConfigError(pair, "expected name=value")
        result[name.strip()] = value
    return result
