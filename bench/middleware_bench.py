"""What the downloader middleware chain costs: pages/s without it and with three built-ins.

A static site (``netdisco.testing.write_site``) is served by aiohttp in a process of
its own; crawls without middleware and with ``default_headers``, ``user_agents`` and
``cookies`` alternate, so that the load of a shared machine falls on both alike.

    .venv/bin/python bench/middleware_bench.py --pages 5000 --rounds 5
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from netdisco_crawler import BenchSpider
from support import served

from netdisco import Crawler, Settings, logs
from netdisco.testing import write_site

STATIC = Path(__file__).resolve().parent / "static_site.py"
BUILT_INS: dict[str, Any] = {
    "default_headers": ("Accept-Language: en", "X-Bench: 1"),
    "user_agents": ("bench-a/1", "bench-b/1", "bench-c/1"),
    "cookies": True,
}


async def crawl(url: str, concurrency: int, **values: Any) -> float:
    settings = Settings(
        concurrency=concurrency, per_host_concurrency=concurrency, progress_interval=0, **values
    )
    crawler = Crawler(BenchSpider(url + "/index.html"), settings)
    stats = await crawler.run()
    return stats.succeeded / float(stats.as_dict()["elapsed"])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pages", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--concurrency", type=int, default=64)
    args = parser.parse_args()
    logs.configure(json=False, level="warning")
    with tempfile.TemporaryDirectory() as root:
        write_site(Path(root), args.pages)
        with served(STATIC, root) as url:
            rates: dict[str, list[float]] = {"none": [], "three built-ins": []}
            for _ in range(args.rounds):
                rates["none"].append(asyncio.run(crawl(url, args.concurrency)))
                rates["three built-ins"].append(
                    asyncio.run(crawl(url, args.concurrency, **BUILT_INS))
                )
    base = statistics.median(rates["none"])
    for name, values in rates.items():
        median = statistics.median(values)
        print(
            f"{name:16} median {median:7.1f} pages/s  ({', '.join(f'{v:.0f}' for v in values)})"
            f"  {100 * (median - base) / base:+.1f}%"
        )


if __name__ == "__main__":
    main()
