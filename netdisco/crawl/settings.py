"""Crawl settings: one frozen dataclass, defaults, docs and checks on each field.

The same names work with ``-s name=value``, in TOML, in an HTTP body and as
``NETDISCO_<NAME>`` environment variables: every source goes through
:func:`netdisco.schema.load`, and every value is checked when the settings are
built, so that a bad one fails at start with the key named, never half-way
through a crawl. Fields are grouped in sections (``SECTIONS``); :func:`reference`
renders them for docs/configuration.md.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, TypeAlias
from urllib.parse import urlsplit

from netdisco._version import __version__
from netdisco.crawl.feeds.spec import FeedSpec, parse_feeds
from netdisco.crawl.scrapynames import (
    SCRAPY_ALIASES,
    SCRAPY_IGNORED,
    SCRAPY_REFUSED,
    ordered_paths,
)
from netdisco.crawl.throttle import MAX_HOST_DELAY, HostRule, parse_hosts
from netdisco.exceptions import ConfigError
from netdisco.frontiers import is_shared
from netdisco.schema import (
    Check,
    Section,
    Source,
    each,
    from_environ,
    load,
    non_negative,
    one_of,
    positive,
    setting,
    within,
)
from netdisco.schema import (
    reference as render_reference,
)
from netdisco.values import parse_duration, parse_int, parse_strings

if TYPE_CHECKING:
    from netdisco.crawl.spider import Spider

DEFAULT_USER_AGENT = f"netdisco/{__version__} (+https://pypi.org/project/netdiscovery/)"
SECTIONS = (
    "limits",
    "scope",
    "politeness",
    "robots",
    "requests",
    "retries",
    "render",
    "frontier",
    "recrawl",
    "cache",
    "feeds",
    "tuning",
)
RECRAWL = ("always", "conditional")
GIB = 1024**3
_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")


def _regex(pattern: str) -> str | None:
    try:
        re.compile(pattern)
    except re.error as exc:
        return f"invalid regular expression {pattern!r}: {exc}"
    return None


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


def _patterns(key: str, value: Any) -> tuple[str, ...]:
    return parse_strings(key, value, split=_split_patterns)


def _agents(key: str, value: Any) -> tuple[str, ...]:
    """One agent as it is (agents hold commas), or a list of them (TOML, JSON text)."""
    return parse_strings(key, value, split=lambda text: [text] if text else [])


def _age(key: str, value: Any) -> float | None:
    return None if value is None else parse_duration(key, value)


def _header(header: str) -> str | None:
    name, sep, _ = header.partition(":")
    ok = sep and _HEADER_NAME.match(name.strip())
    return None if ok else f"expected 'Name: value', got {header!r}"


def _proxy(url: str) -> str | None:
    ok = url.startswith(("http://", "https://"))
    return None if ok else f"expected an http:// or https:// URL, got {url!r}"


def _import_path(path: str) -> str | None:
    ok = path.strip() and ("." in path or ":" in path)
    return None if ok else f"expected 'module:Class', got {path!r}"


def _frontier(url: str) -> str | None:
    if not (url.startswith("memory") or is_shared(url)):
        return f"expected 'memory' or a redis:// URL, got {url!r}"
    parts = urlsplit(url)
    if "+cluster" in parts.scheme:
        return None  # several host:port nodes: RedisOptions.check names the bad one
    try:
        parts.port  # noqa: B018 -- parsing it is the check (redis-py would raise later)
    except ValueError as exc:
        return f"not a valid URL, {url!r}: {exc}"
    return None


def _processes(key: str, value: Any) -> int:
    """A count, or ``auto``: one process for each core of this machine."""
    if isinstance(value, str) and value.strip().lower() == "auto":
        return os.cpu_count() or 1
    return parse_int(key, value)


def _up_to(high: int) -> Check:
    """From 1 to ``high``: a bound a request body cannot raise (memory grows with it)."""
    return lambda value: (
        positive(value) or (None if value <= high else f"must be at most {high:,}, got {value!r}")
    )


def _age_check(age: Any) -> str | None:
    ok = isinstance(age, int | float) and positive(age) is None
    return None if ok else f"must be a positive duration in seconds, got {age!r}"


def _host_rule(rule: Any) -> str | None:
    ok = isinstance(rule, HostRule)
    return None if ok else f"expected rows of parse_hosts (or Settings.replace), got {rule!r}"


def _delay_check(value: Any) -> str | None:
    return non_negative(value) or (
        None if value <= MAX_HOST_DELAY else f"must be at most {MAX_HOST_DELAY:g} s"
    )


def _product_token(value: str) -> str | None:
    """RFC 9309: a product token is letters, ``-`` and ``_`` only."""
    if value and not re.fullmatch(r"[A-Za-z_-]+", value):
        return f"{value!r} is not a product token (letters, '-' and '_' only)"
    return None


def _field(default: Any, section: str, doc: str, **more: Any) -> Any:
    return setting(default, section=section, doc=doc, **more)


@dataclass(frozen=True, kw_only=True)
class Settings(Section):
    """How one spider crawls. Sizes in bytes, durations in seconds; 0 means no limit."""

    KIND: ClassVar[str] = "setting"
    RENAMED: ClassVar[Mapping[str, str]] = {
        "user_agent": "renamed to user_agents (a list; one agent is accepted as a string): "
        "user_agents = ['my-bot/1.0']",
        "proxy": "renamed to proxies (a list; one URL is accepted as a string): "
        "proxies = ['http://host:3128']",
        **SCRAPY_REFUSED,
    }
    ALIASES: ClassVar[Mapping[str, tuple[str, str]]] = SCRAPY_ALIASES
    IGNORED: ClassVar[Mapping[str, str]] = SCRAPY_IGNORED

    # limits: how much is fetched
    max_pages: int = _field(
        0, "limits", "pages to fetch, then finish (0: no limit)", check=non_negative
    )
    depth_limit: int = _field(
        0, "limits", "links followed from a seed (0: no limit)", check=non_negative
    )
    max_response_size: int = _field(
        10 * 1024 * 1024, "limits", "largest body kept, bytes (at most 1 GiB)", check=_up_to(GIB)
    )
    max_redirects: int = _field(10, "limits", "redirects followed per request", check=non_negative)
    timeout: float = _field(30.0, "limits", "seconds one request may take", check=positive)
    connect_timeout: float = _field(10.0, "limits", "seconds to connect", check=positive)
    # scope: which URLs are fetched
    allow: tuple[str, ...] = _field(
        (),
        "scope",
        "regexes a URL must match one of (none: all)",
        parse=_patterns,
        check=each(_regex),
    )
    deny: tuple[str, ...] = _field(
        (), "scope", "regexes no URL may match", parse=_patterns, check=each(_regex)
    )
    allow_private_targets: bool = _field(
        False, "scope", "let POST .../requests push loopback, link-local and private-range URLs"
    )
    # politeness: how hard hosts are hit
    concurrency: int = _field(
        16, "politeness", "requests in flight (at most 10,000)", check=_up_to(10_000)
    )
    per_host_concurrency: int = _field(
        8, "politeness", "requests in flight per host (at most 10,000)", check=_up_to(10_000)
    )
    download_delay: float = _field(
        0.0, "politeness", "seconds between two requests to a host", check=non_negative
    )
    hosts: tuple[HostRule, ...] = _field(
        (),
        "politeness",
        "host -> {download_delay, per_host_concurrency} table: a host's own politeness "
        "(JSON with -s; a host without a port matches every port)",
        parse=parse_hosts,
        check=each(_host_rule),
    )
    autothrottle: bool = _field(
        False, "politeness", "adapt each host's delay to its latency (Scrapy's AutoThrottle)"
    )
    autothrottle_target_concurrency: float = _field(
        1.0,
        "politeness",
        "requests in flight autothrottle aims at per host (at most 10,000)",
        check=within(0.01, 10_000, "must be from 0.01 to 10,000"),
    )
    autothrottle_start_delay: float = _field(
        5.0, "politeness", "autothrottle's delay before a host answered", check=_delay_check
    )
    autothrottle_max_delay: float = _field(
        60.0,
        "politeness",
        "autothrottle's longest delay (a 429 or 503 doubles it)",
        check=_delay_check,
    )
    # robots: robots.txt
    obey_robots: bool = _field(True, "robots", "fetch and obey robots.txt")
    robots_cache_size: int = _field(
        5_000, "robots", "origins whose robots.txt is kept (about 3 KB each)", check=positive
    )
    robots_max_age: float = _field(
        86_400.0,
        "robots",
        "seconds a robots.txt is trusted (RFC 9309: at most 24 h)",
        check=positive,
    )
    robots_backoff: float = _field(
        60.0,
        "robots",
        "seconds a host with an unreachable robots.txt waits; doubled per failure",
        check=positive,
    )
    robots_max_backoff: float = _field(3_600.0, "robots", "longest such wait", check=positive)
    host_give_up_after: float = _field(
        120.0,
        "robots",
        "seconds a host's robots.txt may go unanswered (timeouts, 5xx) before its requests "
        "fail as HostGivenUp (0: only host_error_limit decides)",
        check=non_negative,
    )
    max_crawl_delay: float = _field(
        10.0,
        "robots",
        "longest robots.txt Crawl-delay obeyed: a longer one is cut to it (0: ignore Crawl-delay)",
        check=_delay_check,
    )
    robots_agent: str = _field(
        "",
        "robots",
        "the product token robots.txt groups are matched by, whole and in any case "
        "(RFC 9309; empty: the first user agent's first product, netdisco)",
        check=_product_token,
    )
    # requests: what each request carries (netdisco.crawl.middleware, in chain order)
    user_agents: tuple[str, ...] = _field(
        (),
        "requests",
        "User-Agent, rotated per request if "
        "several; robots.txt matches the first (none: "
        "netdisco/<version>)",
        parse=_agents,
        check=each(lambda a: None if a.strip() else "an empty user agent"),
    )
    default_headers: tuple[str, ...] = _field(
        (), "requests", "'Name: value' headers a request does not set", check=each(_header)
    )
    cookies: bool = _field(False, "requests", "keep one cookie jar for the spider")
    proxies: tuple[str, ...] = _field(
        (),
        "requests",
        "HTTP proxies: one is used for every request (and robots.txt), several are rotated",
        check=each(_proxy),
    )
    proxy_backoff: float = _field(
        30.0, "requests", "seconds a failing rotated proxy rests", check=non_negative
    )
    middlewares: tuple[str, ...] = _field(
        (),
        "requests",
        "'module:Class' middlewares, after the built-in ones",
        check=each(_import_path),
    )
    # retries
    retries: int = _field(2, "retries", "retries of a failed request", check=non_negative)
    host_error_limit: int = _field(
        5,
        "retries",
        "failures in a row of a host's robots.txt (timeout, 5xx) or of its requests (retries "
        "spent) after which its requests fail as HostGivenUp for the crawl (0: never)",
        check=non_negative,
    )
    retry_backoff: float = _field(
        0.5, "retries", "seconds before the first retry, doubled after each", check=non_negative
    )
    retry_max_delay: float = _field(
        60.0, "retries", "longest wait before a retry (Retry-After included)", check=non_negative
    )
    failed_keep: int = _field(
        10_000,
        "retries",
        "failed requests kept to be listed and retried (GET .../failed); beyond, the "
        "oldest are dropped and counted (0: none kept)",
        check=non_negative,
    )
    # render: headless Chromium (netdisco.crawl.render)
    render: bool = _field(False, "render", "render every page in Chromium")
    render_concurrency: int = _field(
        4, "render", "pages rendered at once (at most 256)", check=_up_to(256)
    )
    render_wait: str = _field(
        "load",
        "render",
        "load, domcontentloaded, networkidle or a CSS selector",
        check=lambda w: None if w.strip() else "expected load, networkidle or a CSS selector",
    )
    render_timeout: float = _field(30.0, "render", "seconds a page may take", check=positive)
    render_block: tuple[str, ...] = _field(
        ("image", "font", "media"), "render", "resource types not loaded"
    )
    chromium: str = _field("/usr/bin/chromium", "render", "the browser executable")
    # frontier: where the queue lives
    frontier: str = _field(
        "memory", "frontier", "'memory' or a redis:// URL (shared crawl)", check=_frontier
    )
    state_dir: str | None = _field(
        None, "frontier", "directory the memory frontier persists to, so a crawl can resume"
    )
    memory_queue_limit: int = _field(
        50_000,
        "frontier",
        "requests the memory frontier keeps in memory (about 600 bytes each); the rest "
        "wait in a temporary file (0: all in memory)",
        check=non_negative,
    )
    # recrawl: netdisco.crawl.recrawl; both need a page store (state_dir or Redis)
    recrawl: str = _field(
        "always",
        "recrawl",
        "always, or conditional: revalidate with the stored ETag/Last-Modified",
        check=one_of(*RECRAWL),
    )
    age: float | None = _field(
        None,
        "recrawl",
        "a page fetched within it ('1d', seconds) is not fetched again",
        parse=_age,
        check=_age_check,
    )
    # cache: netdisco.crawl.middleware.httpcache, for development
    http_cache: str | None = _field(
        None, "cache", "directory of an HTTP cache: a rerun asks the server nothing (none: off)"
    )
    http_cache_expiration: float = _field(
        0.0, "cache", "seconds a cached response is served (0: for ever)", check=non_negative
    )
    # feeds: where items go (netdisco.crawl.feeds)
    invalid_items: str = _field(
        "keep",
        "feeds",
        "an item that does not fit its schema (netdisco.crawl.schemas), counted and "
        "logged, is then: keep (in the feeds), drop, or fail (the spider ends failed)",
        check=one_of("keep", "drop", "fail"),
    )
    feeds: tuple[FeedSpec, ...] = _field(
        (), "feeds", "URI -> options table (JSON with -s)", parse=parse_feeds
    )
    item_pipelines: tuple[str, ...] = _field(
        (),
        "feeds",
        "Scrapy item pipeline classes ('module.Class'), run in this order before the "
        "feeds (ITEM_PIPELINES' table of numbers is accepted): process_item(item, spider), "
        "open_spider, close_spider, from_crawler",
        parse=ordered_paths,
        check=each(_import_path),
    )
    warc_max_size: int = _field(
        1024**3,
        "feeds",
        "bytes after which a warc feed begins its next file (0: never)",
        check=non_negative,
    )
    # tuning
    processes: int = _field(
        1,
        "tuning",
        "worker processes of this machine that share the crawl (auto: one per core; at "
        "most 256): see docs/crawling.md, 'One crawl on every core'",
        parse=_processes,
        check=_up_to(256),
    )
    stop_deadline: float = _field(
        10.0, "tuning", "seconds in-flight requests get on stop", check=non_negative
    )
    progress_interval: float = _field(
        5.0, "tuning", "seconds between progress lines (0: none)", check=non_negative
    )
    item_buffer: int = _field(
        256, "tuning", "items pending before the spider waits (at most 10^6)", check=_up_to(10**6)
    )
    flush_interval: float = _field(
        0.1, "tuning", "seconds between acknowledgement flushes", check=non_negative
    )
    flush_items: int = _field(
        1000, "tuning", "items that force a flush (at most 10^6)", check=_up_to(10**6)
    )
    host_cache_size: int = _field(
        50_000, "tuning", "hosts whose scope and slot are kept (about 0.5 KB each)", check=positive
    )

    def check(self) -> None:
        if self.state_dir is not None and is_shared(self.frontier):
            raise ConfigError(
                "state_dir", "applies to the standalone frontier; a Redis frontier keeps its state"
            )

    def replace(self, **changes: Any) -> Settings:
        """A copy with some values changed (parsed and checked)."""
        return from_mapping(changes, base=self)

    @property
    def user_agent(self) -> str:
        """The agent robots.txt is matched against and sent by default (not a setting)."""
        return self.user_agents[0] if self.user_agents else DEFAULT_USER_AGENT

    @property
    def proxy(self) -> str | None:
        """The proxy of every request when ``proxies`` names one (not a setting)."""
        return self.proxies[0] if len(self.proxies) == 1 else None


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


def check_crawler(s: Settings) -> None:
    """What a ``Crawler`` checks of its complete settings: ``check_recrawl``, and
    ``processes`` above 1, which ``netdisco crawl -j N`` starts (``netdisco.procs``) while a
    ``Crawler``, and so an engine spider, is one process: refused rather than ignored."""
    check_recrawl(s)
    if s.processes > 1:
        raise ConfigError(
            "processes",
            f"{s.processes} processes are for `netdisco crawl -j N`; a Crawler, and so an "
            "engine spider, runs in one process (engine spiders: not yet)",
        )


def from_mapping(data: Mapping[str, Any], *, base: Settings | None = None) -> Settings:
    """Settings from a mapping (TOML table, ``-s`` pairs); unknown keys are errors."""
    return load(Settings, Source(data), base=base)


def env_source(environ: Mapping[str, str] | None = None) -> Source:
    """The ``NETDISCO_<NAME>`` variables, as one layer of ``layered``."""
    env = os.environ if environ is None else environ
    return from_environ(Settings, env, "NETDISCO_{KEY}", name="{key}")


def from_env(environ: Mapping[str, str] | None = None, *, base: Settings | None = None) -> Settings:
    """Settings from ``NETDISCO_<NAME>`` variables over ``base``."""
    return load(Settings, env_source(environ), base=base)


#: where a crawl's settings come from, and which wins: a higher priority overrides a lower
#: one (Scrapy's ``SETTINGS_PRIORITIES``). Entry points name their sources; the order is
#: this table's alone. ``project``: a Scrapy project's settings.py; ``spider``: its
#: ``custom_settings``; ``file``: a ``--config`` file, an engine's TOML table, an HTTP
#: launch's settings, or what a program hands to ``add_spider``; ``environment``:
#: ``NETDISCO_*``; ``command_line``: ``-s name=value``.
PRIORITIES: Mapping[str, int] = {
    "project": 5, "spider": 10, "file": 20, "environment": 30, "command_line": 40,
}  # fmt: skip
#: how an error or a note names a key of a spider's ``custom_settings``, of settings.py
CUSTOM, PROJECT = "custom_settings.{key}", "settings.py: {key}"


def layered(**sources: Source | None) -> Settings:
    """The defaults under the named ``sources`` (keys of ``PRIORITIES``), merged in the
    table's order through one load: the one merge every entry point calls."""
    unknown = sources.keys() - PRIORITIES.keys()
    if unknown:
        raise TypeError(f"unknown settings sources: {sorted(unknown)}")
    given = {name: source for name, source in sources.items() if source is not None}
    return load(Settings, *(given[name] for name in sorted(given, key=PRIORITIES.__getitem__)))


#: what a crawler (and ``SpiderEngine.add_spider``) takes: settings, or a mapping of them
SettingsLike: TypeAlias = "Settings | Mapping[str, Any]"


def for_spider(spider: Spider, settings: SettingsLike | None) -> Settings:
    """What a crawler of ``spider`` runs with: ``settings`` (a mapping, or a ``Settings``
    of which the values that differ from the defaults count) over the spider's
    ``custom_settings``, as every other entry point merges them."""
    if isinstance(settings, Settings):
        merged = layered(spider=Source(spider.custom_settings, CUSTOM))
        return dataclasses.replace(merged, **_explicit(settings))
    return layered(spider=Source(spider.custom_settings, CUSTOM), file=Source(settings or {}))


def _explicit(settings: Settings) -> dict[str, Any]:
    """The values of ``settings`` that are not the defaults: what its maker chose."""
    defaults = _defaults()
    return {
        f.name: getattr(settings, f.name)
        for f in dataclasses.fields(Settings)
        if f.init and getattr(settings, f.name) != getattr(defaults, f.name)
    }


@functools.cache
def _defaults() -> Settings:
    return Settings()


def parse_pairs(pairs: list[str]) -> dict[str, str]:
    """``["concurrency=64", ...]`` from ``-s`` flags into a mapping."""
    result: dict[str, str] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name.strip():
            raise ConfigError(pair, "expected name=value")
        result[name.strip()] = value
    return result


def reference() -> str:
    """The crawl settings' reference (docs/configuration.md), section by section."""
    return render_reference(Settings, sections=SECTIONS, title="Crawl settings")
