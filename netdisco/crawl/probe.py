"""``netdisco parse``: run a spider's callback on one URL and show what it yields.

The page is fetched through the spider's real downloader (its settings, middleware,
robots.txt, retries, redirects), and the callback runs through the scraper as in a
crawl, so what ``parse`` shows is what a crawl would do with that page. The links a
callback yields are shown; with ``depth`` > 1 those the scheduler admits (in scope, not
seen) are fetched in turn, level by level. Nothing is written: no feed, no pipeline, a
memory frontier (a ``state_dir`` is left untouched).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from netdisco.crawl.crawler import Crawler
from netdisco.crawl.request import Request
from netdisco.crawl.response import Response
from netdisco.crawl.settings import Settings
from netdisco.crawl.spider import Spider
from netdisco.exceptions import ConfigError, RequestError


@dataclass
class Page:
    """One page parsed: what it yielded, or why it could not be had."""

    url: str
    depth: int  # 1: the URL given, 2: a link of it, ...
    callback: str
    status: int | None = None
    items: list[Any] = field(default_factory=list)
    requests: list[Request] = field(default_factory=list)
    error: str | None = None


def callback_of(spider: Spider, name: str | None) -> Any:
    """The spider's method ``name`` (``parse`` when None); a ConfigError if it has none."""
    method = getattr(spider, name or "parse", None)
    if not callable(method) or (name or "parse").startswith("_"):
        raise ConfigError("--callback", f"{type(spider).__name__} has no method {name!r}")
    return method


@asynccontextmanager
async def quiet_crawler(spider: Spider, settings: Settings) -> AsyncIterator[Crawler]:
    """A crawler whose downloader is open and that writes nothing (see the module
    docstring); ``netdisco parse`` and ``netdisco shell`` fetch through it."""
    quiet = settings.replace(feeds=(), state_dir=None, frontier="memory", recrawl="always",
                             age=None, progress_interval=0)  # fmt: skip
    crawler = Crawler(spider, quiet)
    await crawler.frontier.open()
    await crawler.downloader.open()
    try:
        yield crawler
    finally:
        await crawler.downloader.close()
        await crawler.frontier.close()


async def fetch_now(crawler: Crawler, request: Request) -> Response:
    """``request``'s response through ``crawler``'s downloader (a quiet crawler's memory
    frontier owns every host, so nothing is deferred to another engine)."""
    outcome = await crawler.downloader.fetch(request)
    assert isinstance(outcome, Response), "a quiet crawler does not defer"
    return outcome


async def parse_url(
    spider: Spider, settings: Settings, url: str, *, callback: str | None = None, depth: int = 1
) -> list[Page]:
    """The pages parsed from ``url`` down to ``depth`` levels; see the module docstring."""
    pages: list[Page] = []
    async with quiet_crawler(spider, settings) as crawler:
        items: list[Any] = []
        crawler.items.subscribe(on_next=items.append)
        level = [Request(url, callback=callback_of(spider, callback))]
        await crawler.frontier.claim(level)  # a link back to it is not fetched again
        for step in range(depth):
            for request in level:
                pages.append(await _parse_one(crawler, request, items))
            level = await _admitted(crawler) if step + 1 < depth else []
    return pages


async def _parse_one(crawler: Crawler, request: Request, items: list[Any]) -> Page:
    callback = request.callback or crawler.spider.parse
    level = request.depth + 1  # the URL given is level 1, as in Scrapy's parse
    page = Page(request.url, level, getattr(callback, "__name__", "?"))
    try:
        response = await fetch_now(crawler, request)
    except RequestError as exc:
        page.error = f"{type(exc).__name__}: {exc}"
        return page
    page.status = response.status
    before = len(items)
    errors = crawler.stats.callback_errors
    await crawler.scraper.scrape(request, response, keep=page.requests)
    page.items = items[before:]
    if crawler.stats.callback_errors > errors:
        page.error = crawler.stats.last_error
    return page


async def _admitted(crawler: Crawler) -> list[Request]:
    """The requests the scheduler queued (in scope, new): the next level's pages."""
    taken = []
    while (request := await crawler.frontier.take()) is not None:
        taken.append(request)
        await crawler.frontier.done(request)
    return taken
