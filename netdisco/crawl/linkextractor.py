"""Which links of a page to follow: ``LinkExtractor``, as Scrapy users know it, on parsel.

Usable alone (``LinkExtractor(...).extract_links(response)``) or in a ``CrawlSpider``'s
rules (``spiders.py``). Links to binary files (``IGNORED_EXTENSIONS``) are skipped by
default: a crawl that follows every link must not download every archive and video.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple
from urllib.parse import urljoin, urlsplit

from parsel import Selector

from netdisco.crawl.response import Response
from netdisco.crawl.urls import canonical_url

#: Scrapy's list (``scrapy.linkextractors.IGNORED_EXTENSIONS``): archives, images,
#: audio, video, office documents and other files a page crawl has no use for
IGNORED_EXTENSIONS = (
    # archives
    "7z", "7zip", "bz2", "rar", "tar", "tar.gz", "xz", "zip",
    # images
    "mng", "pct", "bmp", "gif", "jpg", "jpeg", "png", "pst", "psp", "tif", "tiff", "ai",
    "drw", "dxf", "eps", "ps", "svg", "cdr", "ico", "webp",
    # audio
    "mp3", "wma", "ogg", "wav", "ra", "aac", "mid", "au", "aiff",
    # video
    "3gp", "asf", "asx", "avi", "mov", "mp4", "mpg", "qt", "rm", "swf", "wmv", "m4a", "m4v",
    "flv", "webm",
    # office suites
    "xls", "xlsm", "xlsx", "xltm", "xltx", "potm", "potx", "ppt", "pptm", "pptx", "pps",
    "doc", "docb", "docm", "docx", "dotm", "dotx", "odt", "ods", "odg", "odp",
    # other
    "css", "pdf", "exe", "bin", "rss", "dmg", "iso", "apk", "jar", "sh", "rb", "js", "hta",
    "bat", "cpl", "msi", "msp", "py",
)  # fmt: skip

_SCHEMES = frozenset({"http", "https"})


@dataclass(frozen=True, slots=True)
class Link:
    """One extracted link: the absolute URL, the anchor's text, and ``rel="nofollow"``."""

    url: str
    text: str = ""
    fragment: str = ""
    nofollow: bool = False


class Found(NamedTuple):
    """A link as scanned, with what the filters look at (the host, the path lower-cased)."""

    link: Link
    host: str
    path: str


def _patterns(
    values: str | re.Pattern[str] | Iterable[str | re.Pattern[str]],
) -> list[re.Pattern[str]]:
    if isinstance(values, str | re.Pattern):
        values = [values]
    return [re.compile(v) for v in values]


def _strings(values: str | Iterable[str]) -> tuple[str, ...]:
    return (values,) if isinstance(values, str) else tuple(values)


def _in_domains(host: str, domains: tuple[str, ...]) -> bool:
    """``host`` is one of ``domains`` or a subdomain of one (``docs.example.com``)."""
    return any(host == d or host.endswith("." + d) for d in domains)


def _is_html(response: Response) -> bool:
    """Only markup has links to extract (an image or a PDF has none)."""
    kind = response.headers.get("Content-Type", "").split(";", 1)[0].strip().lower()
    return not kind or kind.endswith(("html", "xml"))


class LinkExtractor:
    """Links of a response that pass the filters, in document order, each once.

    ``allow``/``deny``: regexes the absolute URL must (not) match; ``allow_domains``/
    ``deny_domains``: hosts (and their subdomains); ``restrict_xpaths``/``restrict_css``:
    only links inside these regions; ``tags``/``attrs``: which elements and attributes
    hold links; ``deny_extensions``: file extensions skipped (default
    ``IGNORED_EXTENSIONS``; ``()`` for none); ``process_value`` may rewrite or drop
    (``None``) each raw value; ``canonicalize`` gives each URL the canonical form that
    fingerprints use (``urls.canonical_url``).
    """

    def __init__(
        self,
        allow: str | re.Pattern[str] | Iterable[str | re.Pattern[str]] = (),
        deny: str | re.Pattern[str] | Iterable[str | re.Pattern[str]] = (),
        allow_domains: str | Iterable[str] = (),
        deny_domains: str | Iterable[str] = (),
        restrict_xpaths: str | Iterable[str] = (),
        restrict_css: str | Iterable[str] = (),
        tags: str | Iterable[str] = ("a", "area"),
        attrs: str | Iterable[str] = ("href",),
        *,
        deny_extensions: Iterable[str] | None = None,
        process_value: Callable[[str], str | None] | None = None,
        canonicalize: bool = False,
        unique: bool = True,
        strip: bool = True,
    ) -> None:
        self.allow, self.deny = _patterns(allow), _patterns(deny)
        self.allow_domains = tuple(d.lower() for d in _strings(allow_domains))
        self.deny_domains = tuple(d.lower() for d in _strings(deny_domains))
        self.restrict_xpaths = _strings(restrict_xpaths)
        self.restrict_css = _strings(restrict_css)
        self.tags, self.attrs = frozenset(_strings(tags)), _strings(attrs)
        exts = IGNORED_EXTENSIONS if deny_extensions is None else deny_extensions
        self.deny_extensions = tuple("." + e.lower().lstrip(".") for e in exts)
        self.process_value = process_value
        self.canonicalize, self.unique, self.strip = canonicalize, unique, strip

    def extract_links(self, response: Response) -> list[Link]:
        """The response's links that pass every filter (none if it is not markup)."""
        return self.select(self.scan(response))

    @property
    def scan_key(self) -> tuple[Any, ...]:
        """Extractors with equal keys find the same raw links (``scan``) on a page."""
        return (
            self.tags,
            self.attrs,
            self.restrict_xpaths,
            self.restrict_css,
            self.strip,
            self.process_value,
            self.canonicalize,
        )

    def scan(self, response: Response) -> list[Found]:
        """Every http(s) link of the regions, before the URL filters, in document order
        (a ``CrawlSpider`` scans a page once for all rules with one ``scan_key``)."""
        if not _is_html(response):
            return []
        base = self._base_url(response)
        return [
            found for element in self._elements(response) for found in self._links_of(element, base)
        ]

    def select(self, scanned: list[Found]) -> list[Link]:
        """The scanned links that pass the URL filters, each once (``unique``)."""
        links: list[Link] = []
        seen: set[str] = set()
        for found in scanned:
            url = found.link.url
            if self.unique and url in seen:
                continue
            if self._passes(found):
                seen.add(url)
                links.append(found.link)
        return links

    def matches(self, url: str) -> bool:
        """Whether ``url`` passes the URL filters (scheme, regexes, domains, extensions)."""
        parts = urlsplit(url)
        if parts.scheme not in _SCHEMES:
            return False
        return self._passes(Found(Link(url), (parts.hostname or "").lower(), parts.path.lower()))

    def _passes(self, found: Found) -> bool:
        url, host = found.link.url, found.host
        if self.allow_domains and not _in_domains(host, self.allow_domains):
            return False
        if self.deny_domains and _in_domains(host, self.deny_domains):
            return False
        if self.deny_extensions and found.path.endswith(self.deny_extensions):
            return False
        if self.allow and not any(p.search(url) for p in self.allow):
            return False
        return not any(p.search(url) for p in self.deny)

    def _base_url(self, response: Response) -> str:
        """``<base href>`` if the page has one, else the response's URL."""
        base = response.xpath("//head/base/@href").get()
        return urljoin(response.url, base.strip()) if base else response.url

    def _regions(self, response: Response) -> list[Selector]:
        if not (self.restrict_xpaths or self.restrict_css):
            return [response.selector]
        regions = [s for x in self.restrict_xpaths for s in response.xpath(x)]
        return regions + [s for c in self.restrict_css for s in response.css(c)]

    def _elements(self, response: Response) -> Iterator[Any]:
        """The lxml elements of the regions whose tag holds links, in document order."""
        for region in self._regions(response):
            root = region.root
            if isinstance(root, str) or not hasattr(root, "iter"):
                continue  # an attribute or text selected: no elements in it
            yield from root.iter(*self.tags)

    def _links_of(self, element: Any, base: str) -> Iterator[Found]:
        for attr in self.attrs:
            value = element.get(attr)
            if value is None:
                continue
            if self.strip:
                value = value.strip()
            if self.process_value is not None and (value := self.process_value(value)) is None:
                continue
            try:  # not made safe here: as ``Response.follow``, the scheduler canonicalises
                url = urljoin(base, value)
                if self.canonicalize:
                    url = canonical_url(url)
                parts = urlsplit(url)
            except ValueError:  # an unparsable URL (``http://[oops``) is no link
                continue
            if parts.scheme not in _SCHEMES:
                continue
            text = " ".join("".join(element.itertext()).split())
            rel = (element.get("rel") or "").lower().split()
            link = Link(url, text, parts.fragment, "nofollow" in rel)
            yield Found(link, (parts.hostname or "").lower(), parts.path.lower())
