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
import uuid
import zlib
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import Any

import structlog

from netdisco.crawl.codec import RequestCodec
from netdisco.crawl.downloader import Downloader
from netdisco.crawl.middleware import Middleware
from netdisco.crawl.request import Request
from netdisco.crawl.response import Response
from netdisco.crawl.scraper import Scraper
from netdisco.crawl.settings import Settings
from netdisco.crawl.spider import Spider
from netdisco.crawl.stats import Stats
from netdisco.exceptions import RequestNotShareable, UnexpectedNotModified
from netdisco.frontiers import Frontier, PageStore

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


class Revalidation(Middleware):
    """Adds the stored validators to every hop of a request being revalidated (first in
    the chain, so the other middlewares see them); a request's own headers win."""

    def __init__(self) -> None:
        self.pending: dict[bytes, dict[str, str]] = {}

    async def process_request(self, request: Request, spider: Spider) -> None:
        headers = self.pending.get(request.fingerprint)
        if headers:
            present = {name.lower() for name in request.headers}
            request.headers.update((k, v) for k, v in headers.items() if k.lower() not in present)


def _asks_itself(request: Request) -> bool:
    """The spider's own request is conditional: its callback gets the 304, as it asked."""
    return any(k.lower() in ("if-none-match", "if-modified-since") for k in request.headers)


def wants_pages(settings: Settings) -> bool:
    """Whether this crawl reads and writes its page store."""
    return settings.recrawl != "always" or settings.age is not None


class PageFetcher:
    """Gets one page and runs its callback: fetched, revalidated, or followed from the store.

    ``pages`` is the crawl's page store (None: the memory frontier); it is read and
    written only when the settings ask for re-crawls, and begins runs in any case.
    ``downloader`` is set by the crawler, which makes it with ``middlewares()``.
    """

    def __init__(
        self, spider: Spider, settings: Settings, stats: Stats, scraper: Scraper,
        pages: PageStore | None,
    ) -> None:  # fmt: skip
        self.spider = spider
        self.stats = stats
        self.scraper = scraper
        self.pages = pages
        self.store = pages if wants_pages(settings) else None
        self.revalidation = Revalidation()
        self.downloader: Downloader | None = None
        self.codec = RequestCodec(spider)
        self.conditional = settings.recrawl == "conditional"
        self.age = settings.age

    def middlewares(self) -> list[Middleware]:
        """Ours, first in the downloader's chain."""
        return [self.revalidation] if self.conditional else []

    async def _download(self, request: Request) -> Response:
        assert self.downloader is not None, "PageFetcher.downloader was not set"
        return await self.downloader.fetch(request)

    async def __call__(self, request: Request) -> None:
        """Process ``request``; a ``RequestError`` when it came to nothing."""
        if self.store is None:
            await self._scrape(request, await self._download(request), None)
            return
        page = await self._stored(request)
        if page is not None and self.age is not None and time.time() - page.fetched_at < self.age:
            self.stats.age_skipped += 1
            await self._follow_stored(request, page)
            return
        conditions = page.validators() if page is not None and self.conditional else {}
        response = await self._fetch(request, conditions)
        if response.status == 304 and (conditions or not _asks_itself(request)):
            await self._not_modified(request, response, page if conditions else None)
            return
        links: list[Request] = []
        await self._scrape(request, response, links)
        await self._keep(request, response, links)

    async def _stored(self, request: Request) -> PageRecord | None:
        assert self.store is not None
        raw = await self.store.get_page(request.fingerprint)
        if raw is None:
            return None
        try:
            return PageRecord.decode(raw)
        except _UNREADABLE as exc:
            log.warning("stored_page_unreadable", url=request.url, error=repr(exc))
            return None

    async def _fetch(self, request: Request, headers: dict[str, str]) -> Response:
        if not headers:
            return await self._download(request)
        self.revalidation.pending[request.fingerprint] = headers
        try:
            return await self._download(request)
        finally:
            self.revalidation.pending.pop(request.fingerprint, None)

    async def _scrape(
        self, request: Request, response: Response, keep: list[Request] | None
    ) -> None:
        self.stats.succeeded += 1
        self.stats.pages.add()
        callback = request.callback or self.spider.parse
        depth = request.depth + 1
        await self.scraper.run(callback, response, url=response.url, depth=depth, keep=keep)

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
        assert self.store is not None
        await self.store.put_page(request.fingerprint, page.encode())


async def begin_run(
    frontier: Frontier[Request], store: PageStore | None, settings: Settings, run: str | None
) -> None:
    """Begin a new run (generation) of a finished stored crawl: seen set emptied, pages kept.

    ``run`` is the scheduled tick's id (the same on every engine of a shared crawl).
    Unscheduled, only a crawl that re-crawls (``recrawl``/``age``) begins a new run;
    otherwise a finished state stays finished. A crawl that did not finish resumes.
    """
    if store is None or (run is None and not wants_pages(settings)):
        return
    if not await frontier.ran_to_end():
        return
    run = run or f"run-{uuid.uuid4().hex}"
    if await store.begin_run(run):
        log.info("run_begun", run=run)
