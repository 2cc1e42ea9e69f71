"""Sitemaps read incrementally: XML (``urlset``, ``sitemapindex``), gzip and plain text.

The body is fed to lxml's pull parser in chunks (gzip decompressed on the way, chosen
by its magic bytes, not its name or headers) and each entry is dropped from the tree
once yielded, so a 50,000-URL sitemap never becomes a 50,000-element tree. A document
that is not well-formed, or grows past ``max_size`` decompressed bytes, raises
``SitemapInvalid`` after the entries read so far: a broken sitemap costs its rest,
never the crawl (``SitemapSpider`` counts and logs it).
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import NamedTuple

from lxml import etree

from netdisco.exceptions import SitemapInvalid

CHUNK = 64 * 1024
GZIP_MAGIC = b"\x1f\x8b"
#: the sitemap protocol's limit on an uncompressed sitemap
MAX_SIZE = 50 * 1024 * 1024


class SitemapEntry(NamedTuple):
    """A page's ``<url>``, or (``sitemap`` true) a ``<sitemap>`` of an index."""

    loc: str
    lastmod: datetime | None = None
    alternates: tuple[str, ...] = ()
    sitemap: bool = False


def parse_lastmod(value: str | None) -> datetime | None:
    """A W3C datetime (``2024-05-01``, ``2024-05-01T10:00:00+02:00``), UTC if it has no
    zone; ``None`` if absent or unreadable (a bad date only loses the filter's input)."""
    if not value:
        return None
    try:
        moment = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def _chunks(body: bytes, max_size: int) -> Iterator[bytes]:
    """The document's bytes, decompressed if gzip, in chunks; stops past ``max_size``."""
    if not body.startswith(GZIP_MAGIC):
        if len(body) > max_size:
            raise SitemapInvalid(f"sitemap of {len(body)} bytes > {max_size}")
        for start in range(0, len(body), CHUNK):
            yield body[start : start + CHUNK]
        return
    inflate, total = zlib.decompressobj(16 + zlib.MAX_WBITS), 0
    for start in range(0, len(body), CHUNK):
        data = body[start : start + CHUNK]
        while data:
            out = inflate.decompress(data, CHUNK)
            total += len(out)
            if total > max_size:
                raise SitemapInvalid(f"sitemap passed {max_size} bytes decompressed")
            yield out
            data = inflate.unconsumed_tail
        if inflate.eof:
            return
    raise SitemapInvalid("gzip stream truncated")


def _entry(element: etree._Element) -> SitemapEntry | None:
    """The entry an ``<url>``/``<sitemap>`` element describes (``None``: no ``<loc>``)."""
    loc = lastmod = None
    alternates: list[str] = []
    for child in element:
        tag = child.tag
        if not isinstance(tag, str):
            continue
        name = tag[tag.rfind("}") + 1 :]
        if name == "loc":
            loc = (child.text or "").strip()
        elif name == "lastmod":
            lastmod = child.text
        elif name == "link" and child.get("rel") == "alternate" and child.get("href"):
            alternates.append(child.get("href", "").strip())
    if not loc:
        return None
    tag = element.tag
    sitemap = tag[tag.rfind("}") + 1 :] == "sitemap"
    return SitemapEntry(loc, parse_lastmod(lastmod), tuple(alternates), sitemap)


def _xml_entries(chunks: Iterator[bytes]) -> Iterator[SitemapEntry]:
    parser = etree.XMLPullParser(
        events=("end",),
        tag=("{*}url", "{*}sitemap"),  # whatever the namespace (or none)
        resolve_entities=False,
        no_network=True,
        remove_comments=True,
    )
    try:
        for chunk in chunks:
            parser.feed(chunk)
            yield from _drain(parser)
        parser.close()
        yield from _drain(parser)
    except etree.XMLSyntaxError as exc:
        raise SitemapInvalid(f"not well-formed XML: {exc}") from exc


def _drain(parser: etree.XMLPullParser) -> list[SitemapEntry]:
    """The entries completed so far; their elements are cut from the tree, which
    holds only the one being parsed."""
    entries: list[SitemapEntry] = []
    last = None
    for _, element in parser.read_events():
        entry = _entry(element)
        if entry is not None:
            entries.append(entry)
        last = element
    if last is not None and (parent := last.getparent()) is not None:
        del parent[: parent.index(last) + 1]
    return entries


def _text_entries(chunks: Iterator[bytes]) -> Iterator[SitemapEntry]:
    """A text sitemap: one URL a line (UTF-8); other lines are ignored."""
    rest = b""
    for chunk in chunks:
        *lines, rest = (rest + chunk).split(b"\n")
        yield from _text_lines(lines)
    yield from _text_lines([rest])


def _text_lines(lines: list[bytes]) -> Iterator[SitemapEntry]:
    for line in lines:
        url = line.strip().decode("utf-8", "replace")
        if url.startswith(("http://", "https://")):
            yield SitemapEntry(url)


def iter_sitemap(body: bytes, max_size: int = MAX_SIZE) -> Iterator[SitemapEntry]:
    """The entries of a sitemap (XML or text, gzip or not), read incrementally; raises
    ``SitemapInvalid`` after the last good entry if the rest cannot be read."""
    chunks = _chunks(body, max_size)
    first = next(chunks, b"")
    head = first.lstrip(b"\xef\xbb\xbf \t\r\n")

    def again() -> Iterator[bytes]:
        yield first
        yield from chunks

    if head.startswith(b"<"):
        yield from _xml_entries(again())
    else:
        yield from _text_entries(again())
