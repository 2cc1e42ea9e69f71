"""Spiders by reference: from the engine's file, and started over HTTP on a running engine.

``POST /netdiscovery/spiders`` imports user code named by the request, so only
``module:Class`` references whose module the engine's ``spider_modules`` names
(itself or a submodule) are accepted: never a file path, never any other module.
Everything is checked before anything starts, so a bad request starts nothing.

A request's ``settings`` are held to least privilege (docs/security.md): only the
settings ``HTTP_SETTINGS`` names may be set, ``middlewares`` only from
``spider_modules`` too, and a feed only as a relative file under the engine's
``feeds_dir``; the rest (``HTTP_REFUSED``) stays with whoever deploys the engine.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import TYPE_CHECKING, Any

from netdisco.cluster.ticks import Schedule, parse_schedule
from netdisco.crawl import settings as crawl_settings
from netdisco.crawl.arguments import check_args
from netdisco.crawl.feeds.pipeline import feed_path
from netdisco.crawl.feeds.spec import confine
from netdisco.crawl.loader import import_failure, load_spider
from netdisco.crawl.settings import Settings
from netdisco.crawl.spider import Spider
from netdisco.engine.config import EngineConfig, EngineSettings
from netdisco.exceptions import (
    ConfigError,
    DuplicateSpider,
    SettingNotAllowed,
    SpiderLoadError,
    SpiderNotAllowed,
)
from netdisco.schema import Source
from netdisco.values import check_name

if TYPE_CHECKING:
    from netdisco.engine.engine import SpiderEngine  # which imports this module: types only

_BODY_KEYS = frozenset({"spider", "name", "settings", "schedule", "every", "args"})

#: crawl settings a ``POST /netdiscovery/spiders`` body may set: what to fetch and how
#: hard, all bounded by their fields' checks (``middlewares``: from ``spider_modules``;
#: ``feeds``: under ``engine.feeds_dir``)
HTTP_SETTINGS = frozenset(
    {
        *(
            "max_pages",
            "invalid_items",
            "depth_limit",
            "max_response_size",
            "max_redirects",
            "timeout",
        ),
        *("connect_timeout", "allow", "deny", "concurrency", "per_host_concurrency"),
        *("download_delay", "obey_robots", "robots_cache_size", "robots_max_age"),
        *("robots_backoff", "robots_max_backoff", "user_agents", "default_headers"),
        *("cookies", "proxy_backoff", "middlewares", "retries", "retry_backoff"),
        *("retry_max_delay", "render", "render_concurrency", "render_wait", "render_timeout"),
        *("render_block", "recrawl", "age", "feeds", "stop_deadline", "progress_interval"),
        *("item_buffer", "flush_interval", "flush_items", "host_cache_size"),
        *("robots_agent", "host_error_limit", "http_cache_expiration", "warc_max_size"),
        *("hosts", "autothrottle", "autothrottle_target_concurrency", "max_crawl_delay"),
        *("autothrottle_start_delay", "autothrottle_max_delay", "host_give_up_after"),
    }
)
#: the other crawl settings, and why a token holder may not set them
HTTP_REFUSED: Mapping[str, str] = {
    "allow_private_targets": "it lifts the private-address fence",
    "proxies": "it sends every request through a host the caller names",
    "chromium": "it names a program the engine runs",
    "processes": "worker processes are the command line's (netdisco crawl -j); an engine runs one",
    "memory_queue_limit": "it bounds what the engine holds in memory",
    "frontier": "it connects the engine to a Redis the caller names",
    "item_pipelines": "it names classes the engine imports and runs",
    "state_dir": "it writes a database wherever the caller says",
    "http_cache": "it writes a cache of responses wherever the caller says",
    "failed_keep": "it bounds what the engine stores of failed requests (its memory, disk, Redis)",
}


@dataclass(frozen=True, kw_only=True)
class Launch:
    """A spider to add: its class, the name it runs under, its settings and schedule."""

    spider_class: type[Spider]
    name: str
    settings: Settings
    schedule: Schedule | None = None
    args: Mapping[str, str] = field(default_factory=dict)

    def spider(self) -> type[Spider]:
        """The spider class, renamed when the request gave another name."""
        if self.name == self.spider_class.name:
            return self.spider_class
        return type(self.spider_class.__name__, (self.spider_class,), {"name": self.name})


def check_allowed(ref: str, allowed: Sequence[str]) -> None:
    """Refuse a reference whose module the allow-list does not name."""
    module, sep, _ = ref.rpartition(":")
    if not sep or module.endswith(".py") or "/" in module:
        raise SpiderNotAllowed(f"{ref!r}: over HTTP only 'module:Class' is accepted")
    if not allowed:
        raise SpiderNotAllowed("this engine starts no spider over HTTP (set engine.spider_modules)")
    if not any(module == name or module.startswith(name + ".") for name in allowed):
        raise SpiderNotAllowed(f"module {module!r} is not in engine.spider_modules")


def _import_spiders(name: str) -> ModuleType:
    """A module of ``spider_modules``; its own error (a syntax error shown as Python shows
    it, with file, line and caret) as a ``SpiderLoadError``."""
    try:
        return importlib.import_module(name)
    except Exception as exc:  # the module's own error, whatever it is, named
        failure = import_failure(exc)
        raise SpiderLoadError(f"spider_modules: {name!r} cannot be imported: {failure}") from None


def module_spiders(modules: Sequence[str]) -> dict[str, str]:
    """``module:Class`` -> ``name`` of every spider class defined in ``modules`` (the
    engine's ``spider_modules``: each module and, for a package, its submodules), so a
    job of no project can name its spider as ``scrapy crawl`` does."""
    found: dict[str, str] = {}
    for name in modules:
        top = _import_spiders(name)
        inside = getattr(top, "__path__", None)
        subs = pkgutil.walk_packages(inside, prefix=f"{name}.") if inside is not None else ()
        for module in (top, *(_import_spiders(sub.name) for sub in subs)):
            found |= {
                f"{module.__name__}:{cls.__name__}": cls.name or cls.__name__.lower()
                for cls in vars(module).values()
                if isinstance(cls, type)
                and issubclass(cls, Spider)
                and cls.__module__ == module.__name__
            }
    return found


def spider_settings(
    spider_class: type[Spider],
    table: Mapping[str, Any],
    key: str,
    project: Mapping[str, Any] | None = None,
) -> Settings:
    """The spider's ``custom_settings`` (over its Scrapy ``project``'s settings.py, as
    ``netdisco crawl NAME`` layers them) under ``table``; errors name ``key.<setting>``."""
    settings = crawl_settings.layered(
        project=Source(project, crawl_settings.PROJECT) if project else None,
        spider=Source(spider_class.custom_settings, crawl_settings.CUSTOM),
        file=Source(table, f"{key}.{{key}}"),
    )
    try:
        crawl_settings.check_recrawl(settings)
        return settings
    except ConfigError as exc:
        raise ConfigError(f"{key}.{exc.key}", str(exc).removeprefix(f"{exc.key}: ")) from None


def canonical(name: str) -> str:
    """The crawl setting a name stands for: a Scrapy alias (``FEEDS``, ``ITEM_PIPELINES``)
    is its netdisco setting, so that a request is held by what it sets, not how it says it."""
    return Settings.ALIASES[name][0] if name in Settings.ALIASES else name


def refuse_settings(table: Mapping[str, Any]) -> None:
    """Refuse the settings a token holder may not set, all of them named."""
    refused = sorted({canonical(name) for name in table} & set(HTTP_REFUSED))
    if refused:
        reasons = "; ".join(f"{name}: {HTTP_REFUSED[name]}" for name in refused)
        raise SettingNotAllowed(
            f"settings.{refused[0]}",
            f"not settable over HTTP ({reasons}); set it in the engine's file",
        )


def _held(
    table: Mapping[str, Any], s: Settings, name: str, engine: EngineSettings, eid: str
) -> Settings:
    """The request's middlewares checked against ``spider_modules``, and its feeds moved
    under ``feeds_dir`` with each filled-in path checked now (not when the crawl starts)."""
    named = {canonical(name) for name in table}
    for ref in s.middlewares if "middlewares" in named else ():
        try:
            check_allowed(ref, engine.spider_modules)
        except SpiderNotAllowed as exc:
            raise SettingNotAllowed("settings.middlewares", str(exc)) from None
    if "feeds" not in named:
        return s
    root = engine.feeds_dir
    if root is None:
        raise SettingNotAllowed(
            "settings.feeds", "this engine takes no feeds over HTTP (set engine.feeds_dir)"
        )
    feeds = tuple(confine(f"settings.feeds.{f.uri}", f, root) for f in s.feeds)
    for feed in feeds:
        feed_path(feed, spider=name, engine=eid, now=0.0)
    return s.replace(feeds=feeds)


def _body_parts(body: Any) -> tuple[str, dict[str, Any]]:
    """The spider reference and settings table of a body, in the shapes expected."""
    if not isinstance(body, dict):
        raise ConfigError("body", 'expected a JSON object {"spider": "module:Class", ...}')
    unknown = sorted(set(body) - _BODY_KEYS)
    if unknown:
        raise ConfigError(unknown[0], f"unknown key (known: {', '.join(sorted(_BODY_KEYS))})")
    ref, table = body.get("spider"), body.get("settings", {})
    if not isinstance(ref, str) or ":" not in ref:
        raise ConfigError("spider", f"expected 'module:Class', got {ref!r}")
    if not isinstance(table, dict):
        raise ConfigError("settings", f"expected an object, got {table!r}")
    return ref, table


def from_body(
    body: Any, engine: EngineSettings, engine_id: str, project: Mapping[str, Any] | None = None
) -> Launch:
    """A ``POST /netdiscovery/spiders`` body, checked, its spider loaded; or why not
    (``project``: a deployed Scrapy project's settings.py values a crawl reads)."""
    ref, table = _body_parts(body)
    schedule = parse_schedule(body.get("schedule"), body.get("every"), key="")
    check_allowed(ref, engine.spider_modules)
    refuse_settings(table)
    spider_class = load_spider(ref)
    name = check_name("name", body.get("name", spider_class.name))
    settings = spider_settings(spider_class, table, "settings", project)
    settings = _held(table, settings, name, engine, engine_id)
    args = check_args(body.get("args", {}), spider_class, key="args.{name}")
    return Launch(
        spider_class=spider_class, name=name, settings=settings, schedule=schedule, args=args
    )


def add_configured(engine: SpiderEngine, config: EngineConfig) -> None:
    """Add every ``[[spiders]]`` entry of ``config`` to ``engine``; errors name the entry."""
    for entry in config.spiders:
        try:
            spider_class = load_spider(entry.spider)
        except SpiderLoadError as exc:
            raise ConfigError(f"{entry.key}.spider", str(exc)) from exc
        settings = entry.settings(spider_class.custom_settings)
        args = check_args(entry.args, spider_class, key=f"{entry.key}.args.{{name}}")
        try:
            engine.add_spider(spider_class, settings, schedule=entry.schedule, args=args)
        except DuplicateSpider as exc:
            raise ConfigError(f"{entry.key}.spider", str(exc)) from exc
