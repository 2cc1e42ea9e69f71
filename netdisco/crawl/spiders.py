"""Generic spiders, as Scrapy users know them: ``CrawlSpider`` follows links by rules,
``SitemapSpider`` crawls what sitemaps list.

A rule's requests carry the rule's index in ``meta["rule"]`` and a method of the
spider as callback, so that shared frontiers (which store callbacks by name) can
queue them; the rule's own callback is looked up again when the response comes.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import structlog
from protego import Protego

from netdisco.crawl.linkextractor import Found, Link, LinkExtractor
from netdisco.crawl.request import CallbackResult, Request, outputs
from netdisco.crawl.response import Response
from netdisco.crawl.sitemaps import MAX_SIZE, SitemapEntry, iter_sitemap
from netdisco.crawl.spider import Spider
from netdisco.exceptions import SitemapInvalid

log = structlog.get_logger(__name__)

ProcessLinks = Callable[[list[Link]], Iterable[Link]]
ProcessRequest = Callable[[Request, Response], Request | None]


@dataclass
class Rule:
    """Which links to follow (``link_extractor``), what to call on their pages
    (``callback``: a method name or a callable, with ``cb_kwargs``), and whether to
    follow the links of those pages too (``follow``: by default only when there is no
    callback, as in Scrapy). ``process_links`` filters a page's links,
    ``process_request`` may change or drop (``None``) each request; both may be
    method names."""

    link_extractor: LinkExtractor = field(default_factory=LinkExtractor)
    callback: str | Callable[..., CallbackResult] | None = None
    cb_kwargs: dict[str, Any] = field(default_factory=dict)
    follow: bool | None = None
    process_links: str | ProcessLinks | None = None
    process_request: str | ProcessRequest | None = None
    errback: str | Callable[..., CallbackResult] | None = None

    def __post_init__(self) -> None:
        if self.follow is None:
            self.follow = self.callback is None


@dataclass(frozen=True, slots=True)
class _Compiled:
    """A rule with its hooks resolved to the spider's methods."""

    link_extractor: LinkExtractor
    callback: Callable[..., CallbackResult] | None
    cb_kwargs: dict[str, Any]
    follow: bool
    process_links: ProcessLinks | None
    process_request: ProcessRequest | None
    errback: Callable[..., CallbackResult] | None


def _method(spider: Spider, value: Any) -> Any:
    """A rule's hook: a method of ``spider`` by name, or the callable itself."""
    if isinstance(value, str):
        found = getattr(spider, value, None)
        if not callable(found):
            raise AttributeError(f"{type(spider).__name__} has no method {value!r} for a rule")
        return found
    return value


class CrawlSpider(Spider):
    """Follows links by ``rules``: each link is requested once, by the first rule whose
    extractor finds it on the page. ``parse_start_url`` handles the start pages;
    ``parse`` is the rules' own callback, not to be overridden."""

    rules: ClassVar[Sequence[Rule]] = ()

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._rules = [self._compiled(rule) for rule in self.rules]

    def _compiled(self, rule: Rule) -> _Compiled:
        return _Compiled(
            rule.link_extractor,
            _method(self, rule.callback),
            rule.cb_kwargs,
            bool(rule.follow),
            _method(self, rule.process_links),
            _method(self, rule.process_request),
            _method(self, rule.errback),
        )

    def parse_start_url(self, response: Response) -> CallbackResult:
        """What to make of a start page (besides following the rules). Nothing by default."""
        return None

    async def parse(self, response: Response) -> AsyncIterator[Any]:
        """A start page, or a page found by a rule: its callback's output, then the links
        the rules follow."""
        index = response.meta.get("rule")
        if index is None:
            callback, kwargs, follow = self.parse_start_url, {}, True
        else:
            rule = self._rules[index]
            callback, kwargs, follow = rule.callback, rule.cb_kwargs, rule.follow
        if callback is not None:
            async for value in outputs(callback(response, **kwargs)):
                yield value
        if follow:
            for request in self.requests_to_follow(response):
                yield request

    def rule_failed(self, request: Request, error: BaseException) -> CallbackResult:
        """A rule's request failed: its errback, if the rule has one."""
        errback = self._rules[request.meta["rule"]].errback
        return errback(request, error) if errback is not None else None

    def requests_to_follow(self, response: Response) -> Iterable[Request]:
        """One request per new link of ``response``, by the first rule that finds it."""
        seen: set[str] = set()
        scans: dict[tuple[Any, ...], list[Found]] = {}  # one scan a page per kind of extractor
        for index, rule in enumerate(self._rules):
            extractor = rule.link_extractor
            key = extractor.scan_key
            if key not in scans:
                scans[key] = extractor.scan(response)
            links = [link for link in extractor.select(scans[key]) if link.url not in seen]
            if rule.process_links is not None:
                links = list(rule.process_links(links))
            for link in links:
                seen.add(link.url)
                request: Request | None = self._request_for(response, index, link)
                if rule.process_request is not None and request is not None:
                    request = rule.process_request(request, response)
                if request is not None:
                    yield request

    def _request_for(self, response: Response, index: int, link: Link) -> Request:
        """A request one level deeper (the link is absolute already: no second join)."""
        errback = self.rule_failed if self._rules[index].errback is not None else None
        return Request(
            link.url,
            callback=self.parse,
            errback=errback,
            meta={"rule": index, "link_text": link.text},
            depth=response.request.depth + 1,
        )


class SitemapSpider(Spider):
    """Crawls the pages that sitemaps list.

    ``sitemap_urls``: sitemaps, sitemap indexes, or robots.txt files whose ``Sitemap:``
    lines are followed. ``sitemap_rules``: ``(regex, callback)`` pairs, the first whose
    regex matches a page's URL calls it back (a method name or a callable).
    ``sitemap_follow``: regexes an index's sitemaps must match to be read.
    ``sitemap_alternate_links``: also request the ``xhtml:link`` alternates.
    ``sitemap_filter`` may drop entries (by ``lastmod``, say). ``sitemap_max_size``
    caps one sitemap, decompressed. ``sitemap_stats`` counts sitemaps read, entries
    and the sitemaps that could not be read to their end (``invalid``).
    """

    sitemap_urls: ClassVar[Sequence[str]] = ()
    sitemap_rules: ClassVar[Sequence[tuple[str, str | Callable[..., CallbackResult]]]] = (
        ("", "parse"),
    )
    sitemap_follow: ClassVar[Sequence[str]] = ("",)
    sitemap_alternate_links: ClassVar[bool] = False
    sitemap_max_size: ClassVar[int] = MAX_SIZE

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._rules = [(re.compile(r), _method(self, cb)) for r, cb in self.sitemap_rules]
        self._follow = [re.compile(r) for r in self.sitemap_follow]
        self.sitemap_stats: Counter[str] = Counter()

    async def start(self) -> AsyncIterator[Request]:
        """One request per ``sitemap_urls`` entry, read by ``parse_sitemap``."""
        for url in self.sitemap_urls:
            yield Request(url, callback=self.parse_sitemap)

    def sitemap_filter(self, entries: Iterable[SitemapEntry]) -> Iterable[SitemapEntry]:
        """The entries to act on; all by default. Override to filter by ``lastmod``."""
        return entries

    def parse_sitemap(self, response: Response) -> Iterator[Request]:
        """A robots.txt (its ``Sitemap:`` lines), an index (its sitemaps) or a sitemap
        (its pages, by ``sitemap_rules``)."""
        if response.url.split("?", 1)[0].endswith("/robots.txt"):
            for url in Protego.parse(response.text).sitemaps:
                yield Request(url, callback=self.parse_sitemap)
            return
        self.sitemap_stats["sitemaps"] += 1
        try:
            for entry in self.sitemap_filter(iter_sitemap(response.body, self.sitemap_max_size)):
                self.sitemap_stats["entries"] += 1
                yield from self._requests_for(entry)
        except SitemapInvalid as exc:
            self.sitemap_stats["invalid"] += 1
            log.warning("sitemap_invalid", url=response.url, error=str(exc))

    def _requests_for(self, entry: SitemapEntry) -> Iterator[Request]:
        if entry.sitemap:
            if any(p.search(entry.loc) for p in self._follow):
                yield Request(entry.loc, callback=self.parse_sitemap)
            return
        urls = (entry.loc, *entry.alternates) if self.sitemap_alternate_links else (entry.loc,)
        for url in urls:
            for pattern, callback in self._rules:
                if pattern.search(url):
                    yield Request(url, callback=callback)
                    break
