"""``SitemapSpider`` and the incremental sitemap reader, against a loopback site."""

from __future__ import annotations

import gzip
import subprocess
import sys
from collections import Counter
from collections.abc import AsyncIterator, Iterable, Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from aiohttp import web

from netdisco import CallablePipeline, Crawler, Response, Settings, SitemapEntry, SitemapSpider
from netdisco.crawl.sitemaps import iter_sitemap
from netdisco.exceptions import SitemapInvalid
from netdisco.testing import serve

NS = 'xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"'
XHTML = 'xmlns:xhtml="http://www.w3.org/1999/xhtml"'


def urlset(*entries: str) -> bytes:
    head = f'<?xml version="1.0" encoding="UTF-8"?><urlset {NS} {XHTML}>'
    return f"{head}{''.join(entries)}</urlset>".encode()


def url(loc: str, lastmod: str = "", alternate: str = "") -> str:
    mod = f"<lastmod>{lastmod}</lastmod>" if lastmod else ""
    alt = f'<xhtml:link rel="alternate" hreflang="de" href="{alternate}"/>' if alternate else ""
    return f"<url><loc>{loc}</loc>{mod}{alt}</url>"


class Site:
    """robots.txt -> a gzip index of three sitemaps (XML, gzip XML, text), one it must
    not follow and one that breaks off; every path asked is counted."""

    def __init__(self) -> None:
        self.hits: Counter[str] = Counter()
        self.base = ""

    def files(self) -> dict[str, bytes]:
        b = self.base
        index = f"""<?xml version="1.0"?><sitemapindex {NS}>
            <sitemap><loc>{b}/sm/a.xml</loc><lastmod>2025-01-01</lastmod></sitemap>
            <sitemap><loc>{b}/sm/b.xml.gz</loc></sitemap>
            <sitemap><loc>{b}/sm/c.txt</loc></sitemap>
            <sitemap><loc>{b}/archive/old.xml</loc></sitemap>
            <sitemap><loc>{b}/sm/broken.xml</loc></sitemap>
            </sitemapindex>"""
        return {
            "/robots.txt": f"User-agent: *\nSitemap: {b}/index.xml.gz\n".encode(),
            "/index.xml.gz": gzip.compress(index.encode()),
            "/sm/a.xml": urlset(
                url(f"{b}/shop/1", "2025-03-01", alternate=f"{b}/shop/de/1"),
                url(f"{b}/blog/1", "2025-03-01T10:00:00+02:00"),
                url(f"{b}/shop/old", "2019-01-01"),  # dropped by the lastmod filter
            ),
            "/sm/b.xml.gz": gzip.compress(urlset(url(f"{b}/shop/2"), url(f"{b}/other/1"))),
            "/sm/c.txt": f"{b}/blog/2\n\n  {b}/shop/3  \nnot a url\n".encode(),
            "/archive/old.xml": urlset(url(f"{b}/shop/archived")),
            "/sm/broken.xml": urlset(url(f"{b}/shop/4"))[: -len("</urlset>")] + b"<url><loc>",
        }

    async def handle(self, request: web.Request) -> web.Response:
        self.hits[request.path] += 1
        body = self.files().get(request.path)
        if body is not None:  # no telling content type: gzip is known by its magic bytes
            return web.Response(body=body, content_type="application/octet-stream")
        return web.Response(text=f"<html><h1>{request.path}</h1></html>", content_type="text/html")


@pytest.fixture
async def site() -> AsyncIterator[Site]:
    site = Site()
    app = web.Application()
    app.router.add_get("/{path:.*}", site.handle)
    async with serve(app) as site.base:
        yield site


class Shop(SitemapSpider):
    name = "sitemap-shop"
    sitemap_rules = (("/shop/", "parse_shop"), ("/blog/", "parse_blog"))
    sitemap_follow = ("/sm/",)
    sitemap_alternate_links = True
    base = ""

    def sitemap_filter(self, entries: Iterable[SitemapEntry]) -> Iterator[SitemapEntry]:
        since = datetime(2020, 1, 1, tzinfo=UTC)
        return (e for e in entries if e.lastmod is None or e.lastmod >= since)

    def parse_shop(self, response: Response) -> Iterator[Any]:
        yield {"shop": response.url.removeprefix(self.base)}

    def parse_blog(self, response: Response) -> Iterator[Any]:
        yield {"blog": response.url.removeprefix(self.base)}


async def test_robots_txt_to_a_gzip_index_of_three_sitemaps(site: Site) -> None:
    spider = Shop(sitemap_urls=[site.base + "/robots.txt"], base=site.base)
    items: list[dict[str, Any]] = []
    settings = Settings(obey_robots=False, concurrency=4)
    stats = await Crawler(spider, settings, pipelines=[CallablePipeline(items.append)]).run()
    shops = sorted(i["shop"] for i in items if "shop" in i)
    assert shops == ["/shop/1", "/shop/2", "/shop/3", "/shop/4", "/shop/de/1"]
    assert sorted(i["blog"] for i in items if "blog" in i) == ["/blog/1", "/blog/2"]
    assert site.hits["/archive/old.xml"] == 0  # not matched by sitemap_follow
    assert site.hits["/other/1"] == site.hits["/shop/old"] == 0  # no rule; lastmod filter
    # index + a + b + c + broken were read; the broken one counted, its first URL kept;
    # entries past the filter: 5 in the index, 2 + 2 + 2 + 1 in the sitemaps
    assert spider.sitemap_stats == {"sitemaps": 5, "entries": 12, "invalid": 1}
    assert stats.callback_errors == 0


def test_lastmod_and_alternates_are_read() -> None:
    body = urlset(url("http://h.test/a", "2024-05-01", alternate="http://h.test/de/a"))
    (entry,) = iter_sitemap(body)
    assert entry == SitemapEntry(
        "http://h.test/a", datetime(2024, 5, 1, tzinfo=UTC), ("http://h.test/de/a",), False
    )


def test_a_sitemap_past_the_size_limit_stops_there() -> None:
    body = gzip.compress(urlset(*(url(f"http://h.test/{n}") for n in range(5000))))
    read: list[SitemapEntry] = []
    with pytest.raises(SitemapInvalid, match="decompressed"):
        read.extend(iter_sitemap(body, max_size=100_000))
    assert 1000 < len(read) < 5000  # what came before the limit was read


def test_a_truncated_gzip_is_invalid_after_its_entries() -> None:
    body = gzip.compress(urlset(*(url(f"http://h.test/{n}") for n in range(3000))))
    read: list[SitemapEntry] = []
    with pytest.raises(SitemapInvalid):
        read.extend(iter_sitemap(body[: len(body) // 2]))
    assert read


def test_entities_are_not_resolved() -> None:
    body = (
        b'<?xml version="1.0"?><!DOCTYPE u [<!ENTITY e SYSTEM "file:///etc/hostname">]>'
        b"<urlset><url><loc>http://h.test/&e;</loc></url></urlset>"
    )
    assert [e.loc for e in iter_sitemap(body)] == ["http://h.test/"]


#: a child process measures its peak RSS over a 50,000-URL sitemap's body (tracemalloc
#: does not see libxml2's tree): the body is written to a file first, so that making it
#: does not set the peak
MEMORY = """
import resource, sys, tempfile
from pathlib import Path
from netdisco.crawl.sitemaps import iter_sitemap
with tempfile.TemporaryDirectory() as tmp:
    path = Path(tmp) / "sitemap.xml"
    with path.open("w") as out:
        out.write('<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">')
        for n in range(50_000):
            out.write(f"<url><loc>http://h.test/{n:06d}/{'x' * 200}</loc></url>")
        out.write("</urlset>")
    body = path.read_bytes()
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
count = sum(1 for _ in iter_sitemap(body))
print(count, (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024)
"""


def test_a_50000_url_sitemap_is_read_in_bounded_memory() -> None:
    out = subprocess.run(
        [sys.executable, "-c", MEMORY], capture_output=True, text=True, check=True, timeout=60
    ).stdout.split()
    count, grown_mb = int(out[0]), float(out[1])
    assert count == 50_000
    # the tree is cut as it is read; kept whole it would grow by about 60 MB here
    assert grown_mb < 8, grown_mb
