"""netdisco: an asyncio crawler framework whose engines form a ZooKeeper-monitored cluster.

The data flow, step by step (each step is a module):

1. ``spider``: a Spider yields seed ``Request`` objects (``request``).
2. ``scheduler``: URLs are canonicalised, deduplicated, scoped, queued in the ``frontier``.
3. ``downloader``: requests are fetched politely (``robots``), with retries.
4. ``scraper``: the ``Response`` (``response``) goes to the spider's callback.
5. ``pipelines``: items flow through a reactivex Observable into the item pipelines;
   new requests go back to step 2.
6. ``crawler`` runs steps 1-5 for one spider and counts them (``stats``); the engine
   serves it over HTTP and keeps its znode in ZooKeeper current.

The public surface is what this package exports (``__all__``); import it from
``netdisco``, not from the module that defines it, which may move:

- writing a crawl: ``Spider``, ``Request`` (``FormRequest`` submits a form), ``Response``,
  ``Settings``, ``Crawler``
  (with ``SpiderState``, ``PushResult``); the generic spiders: ``CrawlSpider`` follows
  links by ``Rule``s, each with a ``LinkExtractor`` (usable alone; it yields ``Link``s),
  ``SitemapSpider`` crawls what sitemaps list (its filter sees ``SitemapEntry``s);
  the item pipelines (``Pipeline``,
  ``CallablePipeline``, ``ConsolePipeline``, ``JsonLinesPipeline``), downloader
  ``Middleware`` and the download handler seam (``DownloadHandler``; ``MockHandler``
  answers a crawl with no sockets, for tests); items as Scrapy declares them (``Item``,
  ``Field``, filled by ``ItemLoader``): docs/scrapy.md moves a Scrapy spider over (after
  ``import netdisco as scrapy``, ``scrapy.item``, ``scrapy.http``, ``scrapy.spiders``, ...
  are netdisco's names for Scrapy's modules; ``get_project_settings`` reads the
  settings.py of the Scrapy project around the current directory);
- running engines: ``SpiderEngine``, ``EngineSettings``, ``EngineConfig``,
  ``load_config`` and ``create_app`` (the HTTP API as an aiohttp app to mount),
  ``EngineState`` (an engine's own lifecycle);
  ``SpiderEngine.crawl`` returns a ``CrawlHandle``, awaited for a ``CrawlResult``
  (docs/embedding.md); these are imported on first use, so ``import netdisco`` does
  not load the engine layer;
- errors: ``NetdiscoError`` (the root of every error, tree in ``netdisco.exceptions``),
  ``ConfigError``, ``RequestError``, ``HttpStatusError`` and ``DropItem``.

Every other module is internal: docs/internals.md lists them and what each owns.
``netdisco.testing`` is for tests only.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from netdisco._version import __version__
from netdisco.crawl.crawler import Crawler, PushResult, SpiderState
from netdisco.crawl.forms import FormRequest
from netdisco.crawl.items import Field, Item
from netdisco.crawl.linkextractor import Link, LinkExtractor
from netdisco.crawl.middleware.base import Middleware
from netdisco.crawl.pipelines import CallablePipeline, ConsolePipeline, JsonLinesPipeline, Pipeline
from netdisco.crawl.request import Request
from netdisco.crawl.response import Response
from netdisco.crawl.settings import Settings
from netdisco.crawl.sitemaps import SitemapEntry
from netdisco.crawl.spider import Spider
from netdisco.crawl.spiders import CrawlSpider, Rule, SitemapSpider
from netdisco.crawl.transport import DownloadHandler, MockHandler
from netdisco.exceptions import ConfigError, DropItem, HttpStatusError, NetdiscoError, RequestError

if TYPE_CHECKING:
    from netdisco.crawl.loaders import ItemLoader
    from netdisco.crawl.scrapyproject import get_project_settings
    from netdisco.engine.api import create_app
    from netdisco.engine.config import EngineConfig, EngineSettings, load_config
    from netdisco.engine.engine import SpiderEngine
    from netdisco.engine.lifecycle import EngineState
    from netdisco.engine.ondemand import CrawlHandle, CrawlResult

#: the engine layer's public names -> their module, imported on first use
_LAZY = {
    "ItemLoader": "netdisco.crawl.loaders",  # itemloaders: only for spiders that use it
    "get_project_settings": "netdisco.crawl.scrapyproject",
    "EngineConfig": "netdisco.engine.config",
    "EngineSettings": "netdisco.engine.config",
    "SpiderEngine": "netdisco.engine.engine",
    "EngineState": "netdisco.engine.lifecycle",
    "CrawlHandle": "netdisco.engine.ondemand",
    "CrawlResult": "netdisco.engine.ondemand",
    "create_app": "netdisco.engine.api",
    "load_config": "netdisco.engine.config",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    if not name.startswith("_"):  # scrapy.item.Item after `import netdisco as scrapy`
        from netdisco.crawl.scrapyproject import SUBMODULES, scrapy_modules

        if name in SUBMODULES:
            globals()[name] = scrapy_modules()[f"scrapy.{name}"]
            return globals()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "CallablePipeline",
    "ConfigError",
    "ConsolePipeline",
    "CrawlHandle",
    "CrawlResult",
    "CrawlSpider",
    "Crawler",
    "DownloadHandler",
    "DropItem",
    "EngineConfig",
    "EngineSettings",
    "EngineState",
    "Field",
    "FormRequest",
    "HttpStatusError",
    "Item",
    "ItemLoader",
    "JsonLinesPipeline",
    "Link",
    "LinkExtractor",
    "Middleware",
    "MockHandler",
    "NetdiscoError",
    "Pipeline",
    "PushResult",
    "Request",
    "RequestError",
    "Response",
    "Rule",
    "Settings",
    "SitemapEntry",
    "SitemapSpider",
    "Spider",
    "SpiderEngine",
    "SpiderState",
    "__version__",
    "create_app",
    "get_project_settings",
    "load_config",
]
