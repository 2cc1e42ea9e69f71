"""Reactive operators on the item stream: keep cheap products, add a field, write in batches.

The pipeline composes reactivex operators (``filter``, ``map``, ``buffer_with_count``)
on the spider's item Observable, so ``process`` receives lists of up to
``size`` items and makes one write per batch (the last batch is flushed when
the crawl ends)::

    python examples/local_site.py --port 8000 &
    BATCH_FILE=batches.jsonl netdisco crawl examples/batched_items.py:CheapProducts
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO, Any

from reactivex import operators as ops

from netdisco import Pipeline, Response, Spider


class BatchWriter(Pipeline):
    """Writes each batch as one JSON array per line: one write (and flush) per batch."""

    def __init__(self, path: str | Path, *, size: int = 10, max_price: float = 50.0) -> None:
        self.path = Path(path)
        self.batches = 0
        self._file: IO[str] | None = None
        self.operators = (
            ops.filter(lambda item: item["price"] < max_price),
            ops.map(lambda item: {**item, "price_with_vat": round(item["price"] * 1.2, 2)}),
            ops.buffer_with_count(size),
        )

    async def open(self) -> None:
        self._file = self.path.open("w", encoding="utf-8")

    def process(self, item: Any) -> None:
        assert self._file is not None, "BatchWriter.open() was not awaited"
        self._file.write(json.dumps(item, ensure_ascii=False) + "\n")
        self._file.flush()
        self.batches += 1

    async def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


class CheapProducts(Spider):
    """Crawls the catalogue of ``local_site.py``; its own pipeline batches the cheap items."""

    name = "cheap_products"
    start_urls = (os.environ.get("LOCAL_SITE_URL", "http://127.0.0.1:8000/"),)
    allowed_domains = ("127.0.0.1",)
    batch_path = os.environ.get("BATCH_FILE", "batches.jsonl")
    batch_size = 10

    def parse(self, response: Response) -> Iterator[Any]:
        for block in response.css("div.product"):
            yield {
                "sku": block.css("span.sku::text").get(),
                "price": float(block.css("span.price::text").get("0")),
            }
        yield from response.follow_all(css="a.page", callback=self.parse)

    def pipelines(self) -> Sequence[Pipeline]:
        return [BatchWriter(self.batch_path, size=self.batch_size)]
