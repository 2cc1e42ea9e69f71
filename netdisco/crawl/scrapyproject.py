"""Scrapy projects run as they are: ``netdisco crawl NAME`` beside a ``scrapy.cfg``.

The project's root goes on ``sys.path`` and ``import scrapy`` gets netdisco's names
(``scrapy_modules``: ``scrapy.Spider``, ``scrapy.spiders.CrawlSpider``,
``scrapy.loader.ItemLoader``, ...), so a project moves over with no change; a Scrapy name
netdisco does not have fails its import, naming the file. This lasts for the process (a
command-line crawl). settings.py is read through the crawl settings' Scrapy table
(aliases, refusals and the notes on startproject's boilerplate); names netdisco does not
know are kept for ``from_crawler`` and said once. The spider is found by its ``name`` in
``SPIDER_MODULES``.
"""

from __future__ import annotations

import configparser
import dataclasses
import functools
import importlib
import os
import pkgutil
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import parsel
import structlog

from netdisco.crawl import spiders
from netdisco.crawl.forms import FormRequest
from netdisco.crawl.itemchain import ScrapySettings
from netdisco.crawl.items import Field, Item
from netdisco.crawl.linkextractor import LinkExtractor
from netdisco.crawl.loader import import_failure, missing_module, spider_classes
from netdisco.crawl.request import Request
from netdisco.crawl.response import Response
from netdisco.crawl.scrapylog import LOG_NAMES
from netdisco.crawl.settings import Settings
from netdisco.crawl.spider import Spider
from netdisco.exceptions import DropItem, SpiderLoadError

log = structlog.get_logger(__name__)

#: Scrapy's middleware tables: accepted when they enable nothing (empty, or every entry
#: None, which turns one of Scrapy's own off), refused otherwise (``SCRAPY_REFUSED``)
_MIDDLEWARE_TABLES = ("SPIDER_MIDDLEWARES", "DOWNLOADER_MIDDLEWARES")


@dataclass
class ScrapyProject:
    """A Scrapy project: its root (where scrapy.cfg is) and its settings module's values."""

    root: Path
    settings: dict[str, Any]

    @property
    def spider_modules(self) -> list[str]:
        modules = self.settings.get("SPIDER_MODULES", [])
        return [modules] if isinstance(modules, str) else list(modules)

    def crawl_settings(self) -> dict[str, Any]:
        """settings.py's values a crawl reads (the rest is said once, and kept for
        ``from_crawler``)."""
        taken, unused = split_settings(self.settings)
        if unused:
            why = "not netdisco settings: kept for from_crawler (crawler.settings)"
            log.warning("project_settings_unused", names=sorted(unused), why=why)
        return taken


def split_settings(table: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Scrapy-style settings as (those a crawl reads: netdisco's names and Scrapy's aliases,
    ignored and renamed names; the others, which only ``from_crawler`` reads). A middleware
    table that enables nothing is neither, nor are the log's names (``netdisco.crawl.
    scrapylog`` reads them where a crawl has a log of its own: not in a job)."""
    known = {f.name for f in dataclasses.fields(Settings)}
    known |= {*Settings.ALIASES, *Settings.IGNORED, *Settings.RENAMED}
    taken: dict[str, Any] = {}
    unused: dict[str, Any] = {}
    for name, value in table.items():
        if name in LOG_NAMES or (name in _MIDDLEWARE_TABLES and _enables_nothing(value)):
            continue
        (taken if name in known else unused)[name] = value
    return taken, unused


def _enables_nothing(table: Any) -> bool:
    return not any(value is not None for value in dict(table or {}).values())


def closest_scrapy_cfg(path: str | os.PathLike[str] = ".", prevpath: object = None) -> str:
    """The scrapy.cfg in ``path`` or the nearest directory above it, "" when there is none
    (Scrapy's ``scrapy.utils.conf.closest_scrapy_cfg``; ``prevpath`` is its recursion's)."""
    here = Path(path).resolve()
    for directory in (here, *here.parents):
        if (directory / "scrapy.cfg").is_file():
            return str(directory / "scrapy.cfg")
    return ""


def find_project(start: Path | None = None) -> ScrapyProject | None:
    """The Scrapy project whose scrapy.cfg is in ``start`` (the current directory) or
    above it, with its root put on ``sys.path`` and ``scrapy`` mapped to netdisco; None
    when there is no scrapy.cfg."""
    cfg = closest_scrapy_cfg(start or Path.cwd())
    return open_project(Path(cfg).parent) if cfg else None


def open_project(root: Path) -> ScrapyProject:
    """The Scrapy project whose scrapy.cfg is in ``root``, opened as :func:`find_project`
    opens it (a deployed project's job opens its own root, never a directory above)."""
    config = configparser.ConfigParser()
    config.read(root / "scrapy.cfg", encoding="utf-8")
    name = config.get("settings", "default", fallback=None)
    if not name:
        raise SpiderLoadError(f"{root / 'scrapy.cfg'}: no [settings] default = PROJECT.settings")
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    install_scrapy_modules()
    module = _import(name, root)
    values = {key: getattr(module, key) for key in dir(module) if key.isupper()}
    return ScrapyProject(root, values)


def _import(name: str, root: Path) -> ModuleType:
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        raise SpiderLoadError(missing_module(exc, name)) from exc
    except Exception as exc:
        failure = import_failure(exc)
        raise SpiderLoadError(f"error while importing {name!r} ({root}): {failure}") from exc


def project_spiders(project: ScrapyProject) -> dict[str, list[type[Spider]]]:
    """The spider classes of the project's ``SPIDER_MODULES`` by their ``name`` (what
    ``netdisco list`` prints, as ``scrapy list`` does)."""
    found: dict[str, list[type[Spider]]] = {}
    for module in _spider_modules(project):
        for attribute in spider_classes(module):
            cls = getattr(module, attribute)
            if cls.__module__ == module.__name__ and cls.name:
                found.setdefault(cls.name, []).append(cls)
    return found


def find_spider(project: ScrapyProject, name: str) -> type[Spider]:
    """The spider class whose ``name`` is ``name`` in the project's ``SPIDER_MODULES``;
    two of one name are refused, naming both."""
    found = project_spiders(project)
    if name not in found:
        names = ", ".join(sorted(found)) or "none"
        raise SpiderLoadError(f"no spider named {name!r} in SPIDER_MODULES "
                              f"{project.spider_modules}; the spiders are: {names}")  # fmt: skip
    if len(found[name]) > 1:
        both = ", ".join(f"{cls.__module__}:{cls.__qualname__}" for cls in found[name])
        raise SpiderLoadError(f"two spiders are named {name!r}: {both}")
    return found[name][0]


def _spider_modules(project: ScrapyProject) -> Iterator[ModuleType]:
    for name in project.spider_modules:
        module = _import(name, project.root)
        yield module
        for info in pkgutil.walk_packages(getattr(module, "__path__", []), f"{name}."):
            yield _import(info.name, project.root)


def get_project_settings() -> ScrapySettings:
    """The settings.py values of the Scrapy project around the current directory (Scrapy's
    ``scrapy.utils.project.get_project_settings``); empty outside a project."""
    project = find_project()
    return ScrapySettings(project.settings if project else {})


#: the submodules of ``scrapy`` that ``scrapy_modules`` makes (``scrapy.item``, ...), known
#: without making them: ``netdisco.item`` is one after ``import netdisco as scrapy``
SUBMODULES = frozenset(
    {"exceptions", "http", "item", "linkextractors", "loader", "selector", "spiders", "utils"}
)


@functools.cache
def scrapy_modules() -> dict[str, ModuleType]:
    """The ``scrapy`` modules a project imports, made of netdisco's names (made once: the
    mapped ``scrapy`` is this table's, which the load errors check)."""
    from itemloaders import processors  # as ItemLoader: only for projects

    from netdisco.crawl.loaders import ItemLoader

    tables: dict[str, Mapping[str, Any]] = {
        "scrapy.spiders": {"Spider": Spider, "CrawlSpider": spiders.CrawlSpider,
                           "Rule": spiders.Rule, "SitemapSpider": spiders.SitemapSpider},
        "scrapy.http": {"Request": Request, "FormRequest": FormRequest,
                        "Response": Response, "HtmlResponse": Response,
                        "TextResponse": Response},
        "scrapy.item": {"Item": Item, "Field": Field},
        "scrapy.loader": {"ItemLoader": ItemLoader},
        "scrapy.loader.processors": {name: getattr(processors, name) for name in (
            "Compose", "Identity", "Join", "MapCompose", "SelectJmes", "TakeFirst")},
        "scrapy.linkextractors": {"LinkExtractor": LinkExtractor},
        "scrapy.exceptions": {"DropItem": DropItem},
        "scrapy.selector": {"Selector": parsel.Selector},
        "scrapy.utils.project": {"get_project_settings": get_project_settings},
        "scrapy.utils.conf": {"closest_scrapy_cfg": closest_scrapy_cfg},
        "scrapy.utils": {},
    }  # fmt: skip
    top = {"Spider": Spider, "Request": Request, "FormRequest": FormRequest, "Item": Item,
           "Field": Field}  # fmt: skip
    tables = {"scrapy": {**top, "Selector": parsel.Selector}, **tables}
    modules = {}
    for name, values in tables.items():
        module = ModuleType(name, f"netdisco's names for {name} (netdisco.crawl.scrapyproject)")
        module.__dict__.update(values)
        module.__path__ = []  # a package: its submodules are the ones above
        modules[name] = module
    for name, module in modules.items():  # scrapy.http as an attribute of scrapy
        parent, _, child = name.rpartition(".")
        if parent:
            setattr(modules[parent], child, module)
    return modules


def install_scrapy_modules() -> None:
    """``import scrapy`` gets netdisco's names for the rest of this process."""
    sys.modules.update(scrapy_modules())
