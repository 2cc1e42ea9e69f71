"""What rules and WARC cost: a plain spider vs a three-rule ``CrawlSpider``, jsonl vs warc.

    .venv/bin/python bench/generic_bench.py [--pages 3000] [--runs 3]

Crawls a generated site (``write_site``) through ``MockHandler`` (no sockets: only the
crawler's own work is measured) and prints pages per CPU-second, the best of
``--runs``, for: the plain follow-every-link spider into a jsonl feed, a ``CrawlSpider``
of three rules into the same feed, and the plain spider into a warc feed.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from netdisco import (
    Crawler,
    CrawlSpider,
    LinkExtractor,
    MockHandler,
    Response,
    Rule,
    Settings,
    Spider,
)
from netdisco.crawl.feeds import parse_feeds
from netdisco.testing import write_site

BASE = "http://127.0.0.1:9"


class Plain(Spider):
    name = "plain"
    start_urls = (BASE + "/index.html",)

    def parse(self, response: Response) -> Iterator[Any]:
        yield {"url": response.url, "title": response.css("title::text").get()}
        yield from response.follow_all(css="a")


class Ruled(CrawlSpider):
    name = "ruled"
    start_urls = (BASE + "/index.html",)
    rules = (
        Rule(LinkExtractor(allow=r"/p/00\d/"), callback="parse_item", follow=True),
        Rule(LinkExtractor(allow=r"/p/"), callback="parse_item", follow=True),
        Rule(LinkExtractor(allow=r"/index"), follow=True),
    )

    def parse_item(self, response: Response) -> Iterator[Any]:
        yield {"url": response.url, "title": response.css("title::text").get()}


def pages_of(root: Path) -> dict[str, bytes]:
    return {BASE + "/" + str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*.html")}


async def run(spider: Spider, pages: dict[str, bytes], feed: str) -> float:
    settings = Settings(obey_robots=False, concurrency=16, feeds=parse_feeds("feeds", {feed: {}}))
    crawler = Crawler(spider, settings, download_handler=MockHandler.pages(pages))
    began = time.process_time()
    stats = await crawler.run()
    return stats.succeeded / (time.process_time() - began)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pages", type=int, default=3000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        pages = pages_of(write_site(Path(tmp) / "site", args.pages))
        variants = {
            "plain spider, jsonl feed": (Plain, f"{tmp}/plain.jsonl"),
            "CrawlSpider of three rules, jsonl feed": (Ruled, f"{tmp}/ruled.jsonl"),
            "plain spider, warc feed": (Plain, f"{tmp}/plain.warc.gz"),
        }
        best: dict[str, float] = {}
        for _ in range(args.runs):
            for label, (kind, feed) in variants.items():
                rate = asyncio.run(run(kind(), pages, feed))
                best[label] = max(best.get(label, 0.0), rate)
    reference = best["plain spider, jsonl feed"]
    for label, rate in best.items():
        print(f"{label}: {rate:,.0f} pages per CPU-second ({rate / reference:.2f}x)")


if __name__ == "__main__":
    main()
