"""Re-crawls: revalidate pages against what the last run stored, skip those still fresh.

With ``recrawl = "conditional"`` or an ``age``, every page fetched with a 2xx leaves a
``PageRecord`` in the crawl's page store (``netdisco.frontiers.PageStore``: the
``state_dir``'s SQLite, or Redis for a shared crawl), under its request's fingerprint:
its ETag and Last-Modified, when it was fetched, and the requests its callback yielded
(through the request codec, so they come back with their callbacks). The next run
then, per page:

* fetched within ``age``: not fetched; the stored links are followed (``age_skipped``);
* validators stored and ``recrawl = "conditional"``: fetched with ``If-None-Match`` /
  ``If-Modified-Since`` (on every hop: the validators are those of the page the
  redirects led to). A 304 is ``not_modified``: the stored links are followed, so the
  crawl still reaches pages that are new further down, and the spider's
  ``on_not_modified(response)`` runs (no item by default); the record's time is renewed.
  Anything else is a normal page, and its record is replaced;
* a 304 with no stored record fails the request (``UnexpectedNotModified``), counted.

A record that cannot be read (corrupt, or a validator no header may carry) counts as
none: the page is fetched unconditionally and stored anew.
"""

from __future__ import annotations

import json
import math
import re
import time
import zlib
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import Any

import structlog

from netdisco.crawl.codec import RequestCodec
from netdisco.crawl.context import CrawlContext
from netdisco.crawl.downloader import Downloader
from netdisco.crawl.middleware.builtin import VALIDATORS
from netdisco.crawl.politeness import Deferred
from netdisco.crawl.request import Request
from netdisco.crawl.response import Response
from netdisco.crawl.scraper import Scraper
from netdisco.crawl.settings import Settings
from netdisco.exceptions import RequestNotShareable, UnexpectedNotModified
from netdisco.frontiers import PageStore

log = structlog.get_logger(__name__)

#: a validator we send back: visible ASCII and spaces, bounded (a header must carry it)
_VALIDATOR = re.compile(r"^[\x20-\x7e]{1,1024}$")
_UNREADABLE = (ValueError, KeyError, TypeError, zlib.error)


def clean_validator(value: Any) -> str | None:
    """``value`` if a request header can carry it back, else None."""
    if isinstance(value, str) and _VALIDATOR.match(value) and value.strip():
        return value
    return None


def clean_date(value: Any) -> str | None:
    """A Last-Modified value that parses as an HTTP date, else None."""
    text = clean_validator(value)
    try:
        return text if text is not None and parsedate_to_datetime(text) else None
    except (TypeError, ValueError):
        return None


@dataclass(frozen=True)
class PageRecord:
    """What the page store keeps of one page; ``links`` are requests as the codec wrote them."""

    etag: str | None
    last_modified: str | None
    fetched_at: float
    links: tuple[str, ...] = ()

    def encode(self) -> bytes:
        """Compressed JSON: links repeat their keys, so they shrink about tenfold."""
        data: dict[str, Any] = {"v": 1, "etag": self.etag, "last_modified": self.last_modified}
        data |= {"fetched_at": self.fetched_at, "links": list(self.links)}
        return zlib.compress(json.dumps(data, separators=(",", ":")).encode())

    @classmethod
    def decode(cls, raw: bytes) -> PageRecord:
        """The inverse of ``encode``; ValueError (or KeyError, TypeError) for anything else."""
        data = json.loads(zlib.decompress(raw))
        if not isinstance(data, dict) or data.get("v") != 1:
            raise ValueError("not a page record of version 1")
        links, fetched_at = data["links"], float(data["fetched_at"])
        if not isinstance(links, list) or not all(isinstance(b, str) for b in links):
            raise TypeError("links must be a list of strings")
        if not math.isfinite(fetched_at):
            raise ValueError(f"fetched_at is {fetched_at!r}")
        etag, modified = clean_validator(data["etag"]), clean_date(data["last_modified"])
        return cls(etag, modified, fetched_at, tuple(links))

    def validators(self) -> dict[str, str]:
        """The conditional headers this record allows."""
        headers = {}
        if self.etag:
            headers["If-None-Match"] = self.etag
        if self.last_modified:
            headers["If-Modified-Since"] = self.last_modified
        return headers


def _asks_itself(request: Request) -> bool:
    """The spider's own request is conditional: its callback gets the 304, as it asked."""
    return any(k.lower() in ("if-none-match", "if-modified-since") for k in request.headers)


def wants_pages(settings: Settings) -> bool:
    """Whether this crawl reads and writes its page store."""
    return settings.recrawl != "always" or settings.age is not None


class Recrawl:
    """Gets a page of a re-crawl: skipped (fresh), revalidated, or fetched and stored.

    Made only when the settings ask for re-crawls (``wanted``): a crawl without them
    never enters this module. ``store`` is the crawl's page store.
    """

    def __init__(
        self, ctx: CrawlContext, store: PageStore, downloader: Downloader, scraper: Scraper
    ) -> None:
        self.spider = ctx.spider
        self.stats = ctx.stats
        self.store = store
        self.downloader = downloader
        self.scraper = scraper
        self.codec = RequestCodec(ctx.spider)
        self.conditional = ctx.settings.recrawl == "conditional"
        self.age = ctx.settings.age

    @classmethod
    def wanted(cls, ctx: CrawlContext, downloader: Downloader, scraper: Scraper) -> Recrawl | None:
        """A ``Recrawl`` when the settings ask for one and the frontier keeps pages."""
        store = ctx.frontier.pages()
        if store is None or not wants_pages(ctx.settings):
            return None
        return cls(ctx, store, downloader, scraper)

    async def process(self, request: Request) -> Deferred | None:
        """Process ``request``; a ``RequestError`` when it came to nothing, a
        ``Deferred`` when it waits in its host's queue."""
        page = await self._stored(request)
        if page is not None and self.age is not None and time.time() - page.fetched_at < self.age:
            self.stats.age_skipped += 1
            await self._follow_stored(request, page)
            return None
        conditions = page.validators() if page is not None and self.conditional else {}
        response = await self._fetch(request, conditions)
        if isinstance(response, Deferred):
            return response
        if response.status == 304 and (conditions or not _asks_itself(request)):
            await self._not_modified(request, response, page if conditions else None)
            return None
        links: list[Request] = []
        await self.scraper.scrape(request, response, links)
        await self._keep(request, response, links)
        return None

    async def _stored(self, request: Request) -> PageRecord | None:
        raw = await self.store.get_page(request.fingerprint)
        if raw is None:
            return None
        try:
            return PageRecord.decode(raw)
        except _UNREADABLE as exc:
            log.warning("stored_page_unreadable", url=request.url, error=repr(exc))
            return None

    async def _fetch(self, request: Request, headers: dict[str, str]) -> Response | Deferred:
        if not headers:
            return await self.downloader.fetch(request)
        request.meta[VALIDATORS] = headers  # the Revalidation middleware adds them per hop
        try:
            return await self.downloader.fetch(request)
        finally:
            request.meta.pop(VALIDATORS, None)

    async def _not_modified(
        self, request: Request, response: Response, page: PageRecord | None
    ) -> None:
        if page is None:
            raise UnexpectedNotModified(
                "HTTP 304 Not Modified to a request without conditions: no validators "
                "were stored for this page, so there is nothing to reuse",
                url=response.url,
            )
        self.stats.not_modified += 1
        self.stats.pages.add()  # a response all the same: pages/s does not drop to 0
        await self._follow_stored(request, page)
        depth = request.depth + 1
        await self.scraper.run(self.spider.on_not_modified, response, url=response.url, depth=depth)
        etag = clean_validator(response.headers.get("ETag")) or page.etag
        modified = clean_date(response.headers.get("Last-Modified")) or page.last_modified
        renewed = PageRecord(etag, modified, time.time(), page.links)
        await self._put(request, renewed)

    async def _follow_stored(self, request: Request, page: PageRecord) -> None:
        """Queue the requests the page's callback yielded when it was last fetched."""
        links = []
        for body in page.links:
            try:
                link = self.codec.decode(body)
            except (RequestNotShareable, *_UNREADABLE) as exc:  # a callback renamed since
                log.warning("stored_link_unreadable", url=request.url, error=repr(exc))
                continue
            link.depth = request.depth + 1
            links.append(link)
        for start in range(0, len(links), 256):
            await self.scraper.admit(links[start : start + 256])

    async def _keep(self, request: Request, response: Response, links: list[Request]) -> None:
        if response.status >= 300:
            return
        bodies = []
        for link in links:
            try:
                bodies.append(self.codec.encode(link))
            except RequestNotShareable:  # the frontier said so when it was queued
                continue
        etag = clean_validator(response.headers.get("ETag"))
        modified = clean_date(response.headers.get("Last-Modified"))
        await self._put(request, PageRecord(etag, modified, time.time(), tuple(bodies)))

    async def _put(self, request: Request, page: PageRecord) -> None:
        await self.store.put_page(request.fingerprint, page.encode())
