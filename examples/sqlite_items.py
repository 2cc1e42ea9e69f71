"""A spider whose items go to SQLite in batches, through reactive operators.

The item stream is a reactivex Observable (step 5 of the data flow), so a
pipeline can shape it before it writes: here ``filter`` drops pages without a
title, ``map`` turns each item into a row, and ``buffer_with_count`` groups the
rows so that SQLite sees one ``executemany`` and one commit per batch instead of
one per page. The stream is completed when the spider stops, which flushes the
last, partial batch.

Run it against any site on this machine::

    python examples/sqlite_items.py http://127.0.0.1:8000/ items.sqlite3
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sqlite3
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from reactivex import operators as ops

from netdisco import Crawler, Pipeline, Request, Response, Settings, Spider

Row = tuple[str, str, int]


class PagesSpider(Spider):
    """Every page of one host: its URL, title and number of links."""

    name = "pages"

    def parse(self, response: Response) -> Iterator[dict[str, Any] | Request]:
        links = response.css("a::attr(href)").getall()
        yield {"url": response.url, "title": response.css("title::text").get(), "links": len(links)}
        for href in links:
            yield response.follow(href, callback=self.parse)


def as_row(item: dict[str, Any]) -> Row:
    return (item["url"], item["title"].strip(), item["links"])


class SqlitePipeline(Pipeline):
    """Writes ``pages(url, title, links)`` rows, ``batch`` at a time."""

    def __init__(self, path: str | Path, batch: int = 50) -> None:
        self.path = Path(path)
        self.batch = batch
        self.operators = (
            ops.filter(lambda item: bool(item.get("title"))),
            ops.map(as_row),
            ops.buffer_with_count(batch),
        )
        self.batches = 0
        self._db: sqlite3.Connection | None = None

    async def open(self) -> None:
        self._db = sqlite3.connect(self.path)
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS pages (url TEXT PRIMARY KEY, title TEXT, links INTEGER)"
        )

    def process(self, rows: list[Row]) -> None:
        """One batch: a few milliseconds of local disk, so it runs on the loop."""
        assert self._db is not None, "open() was not awaited"
        with self._db:  # one transaction per batch
            self._db.executemany("INSERT OR REPLACE INTO pages VALUES (?, ?, ?)", rows)
        self.batches += 1

    async def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None


async def crawl(start_url: str, database: Path, settings: Settings | None = None) -> int:
    """Crawl one host from ``start_url`` into ``database``; the number of rows written."""
    spider = PagesSpider(start_urls=[start_url], allowed_domains=[urlsplit(start_url).hostname])
    pipeline = SqlitePipeline(database)
    await Crawler(spider, settings, pipelines=[pipeline]).run()
    with contextlib.closing(sqlite3.connect(database)) as db:
        (rows,) = db.execute("SELECT COUNT(*) FROM pages").fetchone()
    return int(rows)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url", help="where to start, e.g. http://127.0.0.1:8000/")
    parser.add_argument("database", type=Path, help="SQLite file (created if missing)")
    args = parser.parse_args(argv)
    rows = asyncio.run(crawl(args.url, args.database))
    print(f"{rows} pages in {args.database}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
