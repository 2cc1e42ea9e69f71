"""Sitemap reading speed and memory: URLs/s, tracemalloc peak and peak RSS.

    .venv/bin/python bench/sitemap_bench.py [--urls 50000] [--pad 0] [--gzip] [--tree]

Generates a sitemap of ``--urls`` entries (each with a lastmod and an alternate link;
``--pad`` bytes of extra path per URL make it as large as wanted: 900 gives a 50 MB
sitemap), then reads it with ``iter_sitemap``. tracemalloc sees only Python's objects,
not libxml2's tree, so the peak RSS over the body is printed too (``ru_maxrss``, one
process per run). ``--tree`` parses the whole tree at once instead (lxml's
``fromstring``), for comparison.
"""

from __future__ import annotations

import argparse
import gzip
import resource
import tempfile
import time
import tracemalloc
from pathlib import Path

from lxml import etree

from netdisco.crawl.sitemaps import iter_sitemap

NS = (
    'xmlns="http://www.sitemaps.org/schemas/sitemap/0.9" xmlns:xhtml="http://www.w3.org/1999/xhtml"'
)


def sitemap(urls: int, pad: int, gzipped: bool) -> tuple[bytes, int]:
    """The body and its decompressed size, written to a file on the way so that making
    it does not raise the peak RSS above what reading it costs."""
    tail = "x" * pad
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "sitemap.xml"
        with gzip.open(path, "wt", 6) if gzipped else path.open("w") as out:
            size = out.write(f'<?xml version="1.0" encoding="UTF-8"?><urlset {NS}>')
            for n in range(urls):
                size += out.write(
                    f"<url><loc>http://h.test/page/{n:06d}/{tail}</loc>"
                    '<lastmod>2024-05-01</lastmod><xhtml:link rel="alternate" '
                    f'hreflang="de" href="http://h.test/de/{n:06d}"/></url>'
                )
            size += out.write("</urlset>")  # characters: the text is ASCII
        return path.read_bytes(), size


def read(body: bytes, size: int, tree: bool) -> int:
    if tree:
        return len(etree.fromstring(body, etree.XMLParser(huge_tree=True)))
    return sum(1 for _ in iter_sitemap(body, max_size=size + 1))


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--urls", type=int, default=50_000)
    parser.add_argument("--pad", type=int, default=0)
    parser.add_argument("--gzip", action="store_true")
    parser.add_argument("--tree", action="store_true")
    args = parser.parse_args()
    body, size = sitemap(args.urls, args.pad, args.gzip)
    before = rss_mb()
    began, cpu = time.perf_counter(), time.process_time()
    count = read(body, size, args.tree)
    seconds, cpu = time.perf_counter() - began, time.process_time() - cpu
    tracemalloc.start()  # a second pass: tracemalloc slows what it traces
    read(body, size, args.tree)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    print(
        f"{count} URLs, {size / 1e6:.1f} MB sitemap ({len(body) / 1e6:.1f} MB body"
        f"{', gzip' if args.gzip else ''}{', whole tree' if args.tree else ''}): "
        f"{count / cpu:,.0f} URLs per CPU-second ({count / seconds:,.0f}/s wall), "
        f"tracemalloc peak {peak / 1e6:.2f} MB, "
        f"peak RSS +{rss_mb() - before:.1f} MB over the body ({rss_mb():.0f} MB)"
    )


if __name__ == "__main__":
    main()
