"""The benchmark's crawler command for netdisco (see bench/harness/README.md).

Takes ``--start-url URL --concurrency N --out FILE``, crawls the generated site
with every feature on (robots.txt, canonicalising, scope, per-host politeness
bookkeeping, stats, reactive items into JSON lines), and prints one
``BENCH_RESULT {json}`` line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import parsel

import netdisco
from netdisco import Crawler, JsonLinesPipeline, Request, Response, Settings, Spider

TITLE = "div.product h1.product-title::text"
PRICE = "div.product span.price::text"
SKU = "div.product span.sku::text"


class BenchSpider(Spider):
    """Takes the item block and follows every link, as the other benchmark crawlers do."""

    name = "bench"

    def __init__(self, start_url: str) -> None:
        super().__init__()
        self.start_url = start_url
        self.allowed_domains = [urlsplit(start_url).hostname or ""]  # type: ignore[misc]

    async def start(self) -> Any:
        yield Request(self.start_url, callback=self.parse)

    def parse(self, response: Response) -> Iterator[Any]:
        yield {
            "url": response.url,
            "title": response.css(TITLE).get(),
            "price": response.css(PRICE).get(),
            "sku": response.css(SKU).get(),
        }
        for href in response.css("a::attr(href)").getall():
            yield response.follow(href, callback=self.parse)


async def crawl_processes(args: argparse.Namespace, settings: Settings) -> dict[str, Any]:
    """The same crawl as ``netdisco crawl -j N`` runs it: N worker processes, one feed."""
    from netdisco.procs.parent import ProcessCrawl

    command = argparse.Namespace(
        spider=f"{__file__}:BenchSpider",
        arg=[f"start_url={args.start_url}"],
        set=[f"{name}={getattr(settings, name)}" for name in SETTINGS],
        config=None,
        log_json_effective=True,
        log_level="warning",
    )
    settings = settings.replace(feeds={args.out: {"format": "jsonl", "overwrite": True}})
    crawl = ProcessCrawl(command, BenchSpider.name, settings.replace(processes=args.processes))
    await crawl.run()
    # the host queues fetch robots.txt once per host for every worker together
    return {**crawl.stats.as_dict(), "robots_requests": 1, "processes": args.processes}


#: the settings a worker is given (as -s pairs)
SETTINGS = ("concurrency", "per_host_concurrency", "obey_robots", "retries", "progress_interval")


async def crawl(args: argparse.Namespace) -> dict[str, Any]:
    settings = Settings(
        concurrency=args.concurrency,
        per_host_concurrency=args.concurrency,
        obey_robots=True,
        retries=2,
        progress_interval=0,
    )
    if args.middleware:
        settings = settings.replace(
            default_headers=("Accept-Language: en",),
            user_agents=("bench/1", "bench/2"),
            cookies=True,
        )
    if args.processes > 1:
        return await crawl_processes(args, settings)
    spider = BenchSpider(args.start_url)
    crawler = Crawler(spider, settings, pipelines=[JsonLinesPipeline(args.out)])
    stats = await crawler.run()
    robots = crawler.downloader.robots
    # the harness compares pages with the requests nginx served: say how many were robots.txt
    return {**stats.as_dict(), "robots_requests": robots.fetches if robots else 0}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--start-url", required=True)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--out", required=True)
    parser.add_argument(
        "--middleware",
        action="store_true",
        help="with three built-in downloader middlewares (default headers, user agents, cookies)",
    )
    parser.add_argument("--processes", type=int, default=1, help="as netdisco crawl -j N")
    args = parser.parse_args()
    t_start = time.time()
    stats = asyncio.run(crawl(args))
    t_end = time.time()
    result = {
        "crawler": "netdisco",
        "t_start": t_start,
        "t_end": t_end,
        "pages": stats["succeeded"],
        "versions": {
            "netdisco": netdisco.__version__,
            "aiohttp": aiohttp.__version__,
            "parsel": parsel.__version__,
            "python": sys.version.split()[0],
        },
        **stats,
    }
    print("BENCH_RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
