"""Scrapy item pipelines (the ``item_pipelines`` setting, Scrapy's ``ITEM_PIPELINES``).

Scrapy runs them as a chain: each ``process_item(item, spider)`` gets what the one before
returned, and ``DropItem`` ends the item there. netdisco's own pipelines each see every
item, so the chain runs in front of them: what leaves its end is what the feeds and
pipelines get, as in Scrapy. ``open_spider``/``close_spider`` may be coroutines;
``from_crawler(crawler)`` gets a view with ``settings`` (the crawl's Scrapy-style
settings, ``get``/``getbool``/``getint``/``getfloat``/``getlist``), ``stats`` and ``spider``.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import structlog

from netdisco.crawl.spider import Spider
from netdisco.crawl.stats import Stats
from netdisco.exceptions import ConfigError

log = structlog.get_logger(__name__)


class ScrapySettings(dict[str, Any]):
    """Settings as ``from_crawler`` code reads them (Scrapy's typed getters)."""

    def getbool(self, name: str, default: bool = False) -> bool:
        value = self.get(name, default)
        return value.lower() in ("1", "true", "yes") if isinstance(value, str) else bool(value)

    def getint(self, name: str, default: int = 0) -> int:
        return int(self.get(name, default))

    def getfloat(self, name: str, default: float = 0.0) -> float:
        return float(self.get(name, default))

    def getlist(self, name: str, default: Sequence[Any] | None = None) -> list[Any]:
        value = self.get(name, default or [])
        return value.split(",") if isinstance(value, str) else list(value)


@dataclass
class CrawlerView:
    """What ``from_crawler`` is given: the parts of Scrapy's crawler netdisco has."""

    settings: ScrapySettings
    stats: Stats
    spider: Spider


def load_class(path: str) -> Any:
    """The class at ``module.Class`` (or ``module:Class``); ``ConfigError`` if none."""
    module, sep, name = path.rpartition(":") if ":" in path else path.rpartition(".")
    try:
        found = getattr(importlib.import_module(module), name) if sep else None
    except (ImportError, AttributeError) as exc:
        raise ConfigError("item_pipelines", f"cannot load {path!r}: {exc}") from exc
    if found is None:
        raise ConfigError("item_pipelines", f"expected 'module.Class', got {path!r}")
    return found


async def _maybe_await(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


def _is_drop(exc: BaseException) -> bool:
    """``DropItem``: netdisco's, or Scrapy's own (known by name)."""
    return any(cls.__name__ == "DropItem" for cls in type(exc).__mro__)


class ItemChain:
    """The ``item_pipelines`` of one crawl, built when the crawler is made (a class that
    cannot be loaded fails the start, naming it)."""

    def __init__(
        self, paths: Sequence[str], spider: Spider, stats: Stats, settings: Mapping[str, Any]
    ) -> None:
        self.spider, self.stats = spider, stats
        view = CrawlerView(ScrapySettings(settings), stats, spider)
        self.pipelines = [self._build(load_class(path), view) for path in paths]

    @staticmethod
    def _build(cls: Any, view: CrawlerView) -> Any:
        from_crawler = getattr(cls, "from_crawler", None)
        return from_crawler(view) if callable(from_crawler) else cls()

    async def open(self) -> None:
        for pipeline in self.pipelines:
            if hasattr(pipeline, "open_spider"):
                await _maybe_await(pipeline.open_spider(self.spider))

    async def process(self, item: Any) -> Any | None:
        """The item after every pipeline, or None when one dropped it or failed."""
        for pipeline in self.pipelines:
            try:
                item = await _maybe_await(pipeline.process_item(item, self.spider))
            except Exception as exc:
                self._failed(pipeline, exc)
                return None
        return item

    def _failed(self, pipeline: Any, exc: Exception) -> None:
        name = type(pipeline).__name__
        if _is_drop(exc):
            self.stats.dropped_items += 1
            log.debug("item_dropped", pipeline=name, reason=str(exc))
            return
        self.stats.pipeline_error(exc)
        self.stats.error(f"pipeline {name}: {exc!r}")
        log.error("pipeline_error", pipeline=name, error=repr(exc))

    async def close(self) -> None:
        for pipeline in self.pipelines:
            if hasattr(pipeline, "close_spider"):
                try:
                    await _maybe_await(pipeline.close_spider(self.spider))
                except Exception as exc:  # close the others all the same
                    self._failed(pipeline, exc)
