"""Scrapy's setting names, as the crawl settings read them: aliases of netdisco's settings,
startproject's boilerplate accepted with a note, and names refused with what to do instead
(docs/configuration.md renders the tables); and Scrapy's ``{path: order}`` tables."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from netdisco.exceptions import ConfigError
from netdisco.values import parse_strings

#: Scrapy's names for netdisco's settings: (the setting, how its meaning differs)
SCRAPY_ALIASES: Mapping[str, tuple[str, str]] = {
    "DOWNLOAD_DELAY": ("download_delay", "a fixed delay (no RANDOMIZE_DOWNLOAD_DELAY)"),
    "CONCURRENT_REQUESTS": ("concurrency", ""),
    "CONCURRENT_REQUESTS_PER_DOMAIN": (
        "per_host_concurrency",
        "per host name: www.example.com and example.com count apart",
    ),
    "DEPTH_LIMIT": ("depth_limit", ""),
    "USER_AGENT": ("user_agents", "a list, rotated per request; one string is accepted"),
    "ROBOTSTXT_OBEY": ("obey_robots", "true by default in netdisco"),
    "CLOSESPIDER_PAGECOUNT": ("max_pages", "counts pages that succeeded, not every response"),
    "DOWNLOAD_TIMEOUT": ("timeout", ""),
    "DOWNLOAD_MAXSIZE": ("max_response_size", "a larger body fails the request (too_large)"),
    "RETRY_TIMES": ("retries", ""),
    "REDIRECT_MAX_TIMES": ("max_redirects", ""),
    "COOKIES_ENABLED": ("cookies", "false by default in netdisco"),
    "DEFAULT_REQUEST_HEADERS": ("default_headers", "a list of 'Name: value' strings"),
    "FEEDS": ("feeds", "options: format, overwrite and fields"),
    "HTTPCACHE_DIR": ("http_cache", "setting it turns the cache on; no RFC 9111 policy"),
    "HTTPCACHE_EXPIRATION_SECS": ("http_cache_expiration", ""),
    "AUTOTHROTTLE_ENABLED": ("autothrottle", ""),
    "AUTOTHROTTLE_START_DELAY": ("autothrottle_start_delay", ""),
    "AUTOTHROTTLE_MAX_DELAY": ("autothrottle_max_delay", ""),
    "AUTOTHROTTLE_TARGET_CONCURRENCY": (
        "autothrottle_target_concurrency",
        "per host name, as CONCURRENT_REQUESTS_PER_DOMAIN",
    ),
    "ITEM_PIPELINES": ("item_pipelines", "run in order of their numbers, before the feeds"),
    "JOBDIR": ("state_dir", "netdisco's own state format: a Scrapy JOBDIR is not read"),
}
#: Scrapy's settings that ``scrapy startproject`` writes and netdisco has no use for: each
#: is accepted with a one-line note saying why
SCRAPY_IGNORED: Mapping[str, str] = {
    "BOT_NAME": "netdisco names a crawl by its spider",
    "SPIDER_MODULES": "read by `netdisco crawl NAME` beside scrapy.cfg, not a crawl setting",
    "NEWSPIDER_MODULE": "netdisco new writes a spider file where it is told",
    "FEED_EXPORT_ENCODING": "netdisco's feeds are always UTF-8",
    "REQUEST_FINGERPRINTER_IMPLEMENTATION": "netdisco has one fingerprint of its own",
    "TWISTED_REACTOR": "netdisco runs on asyncio, without Twisted",
    "ADDONS": "netdisco has no Scrapy add-ons",
}
#: Scrapy's names that have no netdisco counterpart, and what to do instead
SCRAPY_REFUSED: Mapping[str, str] = {
    "RANDOMIZE_DOWNLOAD_DELAY": "netdisco's download_delay is fixed, never randomized",
    "RETRY_ENABLED": "set retries = 0 to turn retries off",
    "CLOSESPIDER_ITEMCOUNT": "no item limit: max_pages bounds the pages fetched",
    "DOWNLOADER_MIDDLEWARES": "use middlewares = ['module:Class'] (in order, after the "
    "built-in ones) or the spider's middlewares() method",
    "SPIDER_MIDDLEWARES": "netdisco has no spider middleware layer: move the work into the "
    "callbacks, a downloader middleware (middlewares = ['module:Class']) or an item pipeline",
    **{
        name: "the log is the process's, not a crawl's: netdisco --log-level warning (Scrapy's "
        "-L WARNING, --nolog), after the command or before it; netdisco crawl also reads "
        f"{name} from a Scrapy project's settings.py, custom_settings and -s"
        for name in ("LOG_LEVEL", "LOG_FILE", "LOG_ENABLED")
    },
    "HTTPCACHE_ENABLED": "set http_cache = 'DIR' (HTTPCACHE_DIR): a directory turns it on",
}


def ordered_paths(key: str, raw: Any) -> tuple[str, ...]:
    """Import paths from a list, or from Scrapy's ``{path: order}`` table (in order of the
    numbers; a path set to None is left out, as Scrapy disables it)."""
    if isinstance(raw, Mapping):
        orders = {str(path): order for path, order in raw.items() if order is not None}
        if not all(isinstance(order, int | float) for order in orders.values()):
            raise ConfigError(key, "expected a table of 'module.Class' = number")
        return tuple(sorted(orders, key=lambda path: orders[path]))
    if isinstance(raw, str) and raw.lstrip().startswith("{"):  # -s ITEM_PIPELINES='{...}'
        try:
            return ordered_paths(key, json.loads(raw))
        except ValueError as exc:
            raise ConfigError(key, f"expected a JSON object: {exc}") from None
    return parse_strings(key, raw)
