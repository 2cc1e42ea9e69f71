"""Item pipelines on the reactive item stream, fed by real crawls on loopback."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from reactivex import operators as ops

from netdisco import (
    CallablePipeline,
    ConsolePipeline,
    Crawler,
    DropItem,
    JsonLinesPipeline,
    Pipeline,
    Response,
    Settings,
    Spider,
)
from tests.netdisco.sites import Site, crawl, load_example, running_site, seeds


@pytest.fixture
async def site() -> AsyncIterator[Site]:
    async with running_site() as served:
        yield served


@dataclass
class Page:
    """A dataclass item."""

    path: str
    title: str
    tags: list[str]


class DataclassSpider(Spider):
    """Yields one ``Page`` per /tree page, with non-ASCII text."""

    name = "dataclass"

    def parse(self, response: Response) -> Iterator[Any]:
        title = response.css("h1::text").get("")
        yield Page(
            path=response.url.rsplit("/", 2)[-2] + "/" + title[5:], title=f"{title} — é", tags=["ü"]
        )
        yield from response.follow_all(css="a")


async def test_json_lines_are_utf8_dataclasses_closed_on_stop(site: Site, tmp_path: Path) -> None:
    out = tmp_path / "deep" / "items.jsonl"
    pipeline = JsonLinesPipeline(out)
    crawler, items = await crawl(
        DataclassSpider(start_urls=[site.url("/tree/0")]), pipelines=[pipeline]
    )
    assert crawler.stats.items == site.tree_size
    raw = out.read_bytes()
    assert "— é".encode() in raw  # UTF-8, not \\u escapes
    lines = [json.loads(line) for line in raw.decode("utf-8").splitlines()]
    assert sorted(line["title"] for line in lines) == sorted(f"tree {n} — é" for n in range(15))
    assert all(line["tags"] == ["ü"] for line in lines)
    assert all(isinstance(item, Page) for item in items)  # pipelines see the item itself
    assert pipeline._file is None  # closed


async def test_json_lines_reach_the_file_before_close(tmp_path: Path) -> None:
    """A SIGKILLed engine never closes its pipeline: what it flushed (the crawler flushes
    before it acknowledges the requests that yielded the items) must be in the file."""
    out = tmp_path / "items.jsonl"
    pipeline = JsonLinesPipeline(out)
    await pipeline.open()
    pipeline.process({"url": "http://127.0.0.1/0"})
    pipeline.process([{"url": "http://127.0.0.1/1"}, {"url": "http://127.0.0.1/2"}])
    await pipeline.flush()
    assert len(out.read_text().splitlines()) == 3
    await pipeline.close()


async def test_console_pipeline_prints_json_lines(
    site: Site, capsys: pytest.CaptureFixture[str]
) -> None:
    await crawl(seeds(site.url("/tree/14")), pipelines=[ConsolePipeline()])
    out = capsys.readouterr().out.splitlines()
    printed = [json.loads(line) for line in out if line.startswith("{")]  # not log lines
    assert printed == [{"url": site.url("/tree/14"), "title": "tree 14"}]


class Raising(Pipeline):
    """Raises on every other item."""

    def __init__(self) -> None:
        self.seen = 0

    def process(self, item: Any) -> None:
        self.seen += 1
        if self.seen % 2 == 0:
            raise RuntimeError("pipeline bug")


async def test_a_raising_pipeline_is_counted_and_the_crawl_goes_on(site: Site) -> None:
    raising = Raising()
    crawler, items = await crawl(seeds(site.url("/tree/0")), pipelines=[raising])
    assert len(items) == site.tree_size  # the other pipeline got every item
    assert raising.seen == site.tree_size
    assert crawler.stats.pipeline_errors == site.tree_size // 2
    assert "pipeline bug" in (crawler.stats.last_error or "")


class Dropping(Pipeline):
    """Drops items whose title ends in an odd digit; keeps the others."""

    def __init__(self) -> None:
        self.kept: list[Any] = []

    async def process(self, item: Any) -> None:
        await asyncio.sleep(0)
        if int(item["title"][-1]) % 2:
            raise DropItem("odd")
        self.kept.append(item)


async def test_drop_item_sync_and_async(site: Site) -> None:
    def drop_leaves(item: Any) -> None:
        if int(item["title"].split()[1]) >= 7:
            raise DropItem("leaf")

    dropping = Dropping()
    crawler, items = await crawl(
        seeds(site.url("/tree/0")), pipelines=[dropping, CallablePipeline(drop_leaves)]
    )
    odd = sum(1 for n in range(15) if n % 10 % 2)
    assert len(dropping.kept) == 15 - odd
    assert crawler.stats.dropped_items == odd + 8
    assert len(items) == 15  # DropItem ends the item's way through one pipeline only
    assert crawler.stats.pipeline_errors == 0


async def test_async_callable_pipeline(site: Site) -> None:
    stored: list[str] = []

    async def store(item: Any) -> None:
        await asyncio.sleep(0.001)
        stored.append(item["title"])

    await crawl(seeds(site.url("/tree/0")), pipelines=[CallablePipeline(store)])
    assert sorted(stored) == sorted(f"tree {n}" for n in range(15))


class Slow(Pipeline):
    """An async pipeline that takes a while per item and records how many run at once."""

    def __init__(self, site: Site) -> None:
        self.running = 0
        self.peak = 0
        self.done = 0
        self.done_at_hit: list[int] = []
        site.observers.append(lambda path: self.done_at_hit.append(self.done))

    async def process(self, item: Any) -> None:
        self.running += 1
        self.peak = max(self.peak, self.running)
        await asyncio.sleep(0.02)
        self.running -= 1
        self.done += 1


async def test_slow_pipeline_bounds_pending_items_and_slows_the_crawl(site: Site) -> None:
    site.tree_size = 40
    slow = Slow(site)
    crawler, _ = await crawl(
        seeds(site.url("/tree/0")), pipelines=[slow], item_buffer=3, concurrency=2
    )
    assert slow.done == crawler.stats.items == 40
    assert slow.peak <= 3  # never more than item_buffer pending
    # the crawl waited for the pipeline: at each page request, few items were still pending
    lag = [hits - done for hits, done in enumerate(slow.done_at_hit)]
    assert max(lag) <= 3 + 2 + 1, lag  # item_buffer + concurrency + the robots.txt hit


class Batches(Pipeline):
    """filter, map and buffer_with_count composed on the item stream."""

    def __init__(self) -> None:
        self.batches: list[list[Any]] = []
        self.operators = (
            ops.filter(lambda item: item["title"] != "tree 0"),
            ops.map(lambda item: item["title"].upper()),
            ops.buffer_with_count(4),
        )

    def process(self, item: Any) -> None:
        self.batches.append(item)


async def test_reactive_operators_batch_items(site: Site) -> None:
    batches = Batches()
    await crawl(seeds(site.url("/tree/0")), pipelines=[batches])
    assert [len(batch) for batch in batches.batches] == [4, 4, 4, 2]  # the rest flushed at the end
    assert sorted(title for batch in batches.batches for title in batch) == sorted(
        f"TREE {n}" for n in range(1, 15)
    )


async def test_batched_items_example(site: Site, tmp_path: Path) -> None:
    example = load_example("batched_items")
    out = tmp_path / "batches.jsonl"
    spider = example.CheapProducts(
        start_urls=[site.url("/shop/")], batch_path=str(out), batch_size=4
    )
    crawler, items = await crawl(spider)
    shop = load_example("local_site")
    cheap = sorted(sku for n in range(shop.PAGES) if (sku := shop.product(n))[1] < 50)
    batches = [json.loads(line) for line in out.read_text().splitlines()]
    assert [len(b) for b in batches[:-1]] == [4] * (len(batches) - 1)
    assert 1 <= len(batches[-1]) <= 4
    assert sorted(i["price"] for b in batches for i in b) == sorted(c[1] for c in cheap)
    assert all(i["price_with_vat"] == round(i["price"] * 1.2, 2) for b in batches for i in b)
    assert crawler.stats.items == len(items) == shop.PAGES


async def test_operator_error_is_counted_and_the_pipeline_keeps_going(site: Site) -> None:
    seen: list[str] = []

    def fussy(item: Any) -> str:
        if item["title"] == "tree 0":
            raise ValueError("cannot map tree 0")
        return str(item["title"])

    pipeline = CallablePipeline(seen.append, operators=[ops.map(fussy)])
    crawler, _ = await crawl(seeds(site.url("/tree/0")), pipelines=[pipeline], concurrency=1)
    assert crawler.stats.pipeline_errors == 1
    assert sorted(seen) == sorted(f"tree {n}" for n in range(1, 15))


class FailsToClose(Pipeline):
    async def close(self) -> None:
        raise OSError("disk full")


async def test_close_errors_are_counted_and_others_still_close(site: Site, tmp_path: Path) -> None:
    out = JsonLinesPipeline(tmp_path / "x.jsonl")
    crawler, _ = await crawl(seeds(site.url("/tree/14")), pipelines=[FailsToClose(), out])
    assert crawler.stats.pipeline_errors == 1
    assert out._file is None
    assert (tmp_path / "x.jsonl").read_text().count("\n") == 1


async def test_subscribing_to_the_raw_stream(site: Site) -> None:
    crawler = Crawler(seeds(site.url("/tree/0")), Settings())
    titles: list[str] = []

    def title(item: Any) -> str:
        return str(item["title"])

    crawler.items.pipe(ops.map(title)).subscribe(titles.append)
    await asyncio.wait_for(crawler.run(), 30)
    assert sorted(titles) == sorted(f"tree {n}" for n in range(15))
