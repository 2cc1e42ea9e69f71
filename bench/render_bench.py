"""Rendered pages: pages/s and peak RSS (the crawler and its Chromium) per render_concurrency.

A site whose links are built by JavaScript (``js_site.py``) is served by aiohttp in a
process of its own; each crawl renders every page in Debian's headless Chromium.

    .venv/bin/python bench/render_bench.py --pages 500 --concurrency 2 4 8
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from support import sample_peak, served

from netdisco import Crawler, Request, Response, Settings, Spider, logs

SITE = Path(__file__).resolve().parent / "js_site.py"


class Tree(Spider):
    name = "tree"

    def __init__(self, url: str) -> None:
        super().__init__()
        self.url = url

    async def start(self) -> Any:
        yield Request(self.url + "/p/0")

    def parse(self, response: Response) -> Any:
        yield {"url": response.url, "title": response.css("h1::text").get()}
        yield from response.follow_all(css="#links a")


async def crawl(url: str, concurrency: int) -> tuple[int, float, int]:
    settings = Settings(
        render=True,
        render_concurrency=concurrency,
        concurrency=concurrency,
        per_host_concurrency=concurrency,
        obey_robots=False,
        progress_interval=0,
    )
    peak = [0]
    sampler = asyncio.create_task(sample_peak(os.getpid(), peak))
    crawler = Crawler(Tree(url), settings)
    stats = await crawler.run()
    sampler.cancel()
    return stats.succeeded, float(stats.as_dict()["elapsed"]), peak[0]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pages", type=int, default=500)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[2, 4, 8])
    args = parser.parse_args()
    logs.configure(json=False, level="warning")
    with served(SITE, str(args.pages)) as url:
        print("| render_concurrency | pages | seconds | pages/s | peak RSS (MB) |")
        print("|---|---|---|---|---|")
        for concurrency in args.concurrency:
            pages, seconds, peak = asyncio.run(crawl(url, concurrency))
            rate = pages / seconds
            print(f"| {concurrency} | {pages} | {seconds:.1f} | {rate:.1f} | {peak / 2**20:.0f} |")


if __name__ == "__main__":
    main()
