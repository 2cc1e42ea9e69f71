"""Downloader middleware and the order they run in.

Order (``process_request`` top to bottom, ``process_response`` bottom to top):

0. ``HttpCache``          (``http_cache``: answers from its directory, stores the rest)
1. ``Revalidation``       (``recrawl = "conditional"``: the stored validators)
2. ``DefaultHeaders``     (``default_headers``)
3. ``UserAgentRotation``  (``user_agents``)
4. ``Cookies``            (``cookies = true``)
5. ``ProxyRotation``      (``proxies``)
6. the ``middlewares`` setting's import paths, in order
7. the spider's ``middlewares()``, in order
8. the download handler (aiohttp, Chromium for rendered requests, or the crawl's
   ``download_handler``)

Around the chain the downloader keeps, outside in: retries, redirect following
(the chain runs once per hop), then per hop the scope, seen-set and robots.txt
checks, and inside the chain, politeness (per-host slot and delay) around the handler.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import TYPE_CHECKING

from netdisco.crawl.middleware.base import Chain, Middleware, middleware_name
from netdisco.crawl.middleware.builtin import (
    Cookies,
    DefaultHeaders,
    ProxyRotation,
    Revalidation,
    UserAgentRotation,
)
from netdisco.crawl.middleware.httpcache import HttpCache
from netdisco.exceptions import ConfigError

if TYPE_CHECKING:
    from netdisco.crawl.settings import Settings
    from netdisco.crawl.spider import Spider


def header_pairs(lines: tuple[str, ...]) -> dict[str, str]:
    """``("Accept-Language: en", ...)`` as a mapping; the settings validate the form."""
    return {name.strip(): value.strip() for name, _, value in (h.partition(":") for h in lines)}


def load_middleware(path: str) -> Middleware:
    """An instance of the class (or factory) at ``module:Name`` or ``module.Name``."""
    module_name, sep, attribute = path.partition(":")
    if not sep:
        module_name, _, attribute = path.rpartition(".")
    try:
        factory = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError, ValueError) as exc:
        raise ConfigError("middlewares", f"cannot load {path!r}: {exc}") from exc
    instance = factory()
    if not isinstance(instance, Middleware):
        raise ConfigError("middlewares", f"{path!r} made {instance!r}, not a Middleware")
    return instance


def build_middlewares(settings: Settings, spider: Spider) -> list[Middleware]:
    """The spider's middlewares in chain order (see the module docstring)."""
    chain: list[Middleware] = []
    if settings.http_cache is not None:  # first: a cached answer needs none of the others
        directory = Path(settings.http_cache) / spider.name
        chain.append(HttpCache(directory, settings.http_cache_expiration))
    if settings.recrawl == "conditional":  # first: the others see the validators
        chain.append(Revalidation())
    if settings.default_headers:
        chain.append(DefaultHeaders(header_pairs(settings.default_headers)))
    if settings.user_agents:
        chain.append(UserAgentRotation(settings.user_agents))
    if settings.cookies:
        chain.append(Cookies())
    if settings.proxies:
        chain.append(ProxyRotation(settings.proxies, settings.proxy_backoff))
    chain.extend(load_middleware(path) for path in settings.middlewares)
    chain.extend(spider.middlewares())
    return chain


__all__ = [
    "Chain",
    "Cookies",
    "DefaultHeaders",
    "HttpCache",
    "Middleware",
    "ProxyRotation",
    "Revalidation",
    "UserAgentRotation",
    "build_middlewares",
    "load_middleware",
    "middleware_name",
]
