"""Spiders by reference: from the engine's file, and started over HTTP on a running engine.

``POST /netdiscovery/spiders`` imports user code named by the request, so only
``module:Class`` references whose module the engine's ``spider_modules`` names
(itself or a submodule) are accepted: never a file path, never any other module.
Everything is checked before anything starts, so a bad request starts nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from netdisco.crawl import settings as crawl_settings
from netdisco.crawl.arguments import check_args
from netdisco.crawl.loader import load_spider
from netdisco.crawl.settings import Settings
from netdisco.crawl.spider import Spider
from netdisco.engine.config import EngineConfig
from netdisco.engine.schedules import Schedule, parse_schedule
from netdisco.exceptions import ConfigError, DuplicateSpider, SpiderLoadError, SpiderNotAllowed
from netdisco.schema import Source

if TYPE_CHECKING:
    from netdisco.engine.engine import SpiderEngine  # which imports this module: types only

_BODY_KEYS = frozenset({"spider", "name", "settings", "schedule", "every", "args"})


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


def spider_settings(spider_class: type[Spider], table: Mapping[str, Any], key: str) -> Settings:
    """The spider's ``custom_settings`` under ``table``; errors name ``key.<setting>``."""
    settings = crawl_settings.layered(spider_class.custom_settings, Source(table, f"{key}.{{key}}"))
    try:
        crawl_settings.check_recrawl(settings)
        return settings
    except ConfigError as exc:
        raise ConfigError(f"{key}.{exc.key}", str(exc).removeprefix(f"{exc.key}: ")) from None


def from_body(body: Any, allowed: Sequence[str]) -> Launch:
    """A ``POST /netdiscovery/spiders`` body, checked, its spider loaded; or why not."""
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
    schedule = parse_schedule(body.get("schedule"), body.get("every"), key="")
    check_allowed(ref, allowed)
    spider_class = load_spider(ref)
    name = body.get("name", spider_class.name)
    if not isinstance(name, str) or not name or "/" in name:
        raise ConfigError("name", f"expected a spider name without '/', got {name!r}")
    settings = spider_settings(spider_class, table, "settings")
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
