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
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from netdisco_crawler import BenchSpider
from support import served

from netdisco import Crawler, Request, Response, Settings, logs
from netdisco.crawl.middleware import Chain, build_middlewares
from netdisco.testing import write_site

STATIC = Path(__file__).resolve().parent / "static_site.py"
BUILT_INS: dict[str, Any] = {
    "default_headers": ("Accept-Language: en", "X-Bench: 1"),
    "user_agents": ("bench-a/1", "bench-b/1", "bench-c/1"),
    "cookies": True,
}


async def crawl(url: str, concurrency: int, **values: Any) -> tuple[float, float]:
    """Pages/s, and CPU ms per page of this process (steadier on a loaded machine)."""
    settings = Settings(
        concurrency=concurrency, per_host_concurrency=concurrency, progress_interval=0, **values
    )
    crawler = Crawler(BenchSpider(url + "/index.html"), settings)
    cpu = time.process_time()
    stats = await crawler.run()
    cpu = time.process_time() - cpu
    return stats.succeeded / float(stats.as_dict()["elapsed"]), 1000 * cpu / stats.succeeded


async def chain_cost(requests: int) -> float:
    """Microseconds the chain of the three built-ins adds to one request (no network)."""
    settings = Settings(**BUILT_INS)
    spider = BenchSpider("http://127.0.0.1:1/")
    response = Response("http://127.0.0.1:1/", 200, {}, b"", Request("http://127.0.0.1:1/"))

    async def download(request: Request) -> Response:
        return response

    bare = Chain([], spider, download)
    full = Chain(build_middlewares(settings, spider), spider, download)
    timings = {}
    for name, chain in (("bare", bare), ("full", full)):
        start = time.perf_counter()
        for n in range(requests):
            await chain(Request(f"http://127.0.0.1:1/p/{n % 1000}", headers={}))
        timings[name] = time.perf_counter() - start
    return 1e6 * (timings["full"] - timings["bare"]) / requests


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pages", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--concurrency", type=int, default=64)
    args = parser.parse_args()
    logs.configure(json=False, level="warning")
    cost = min(asyncio.run(chain_cost(20000)) for _ in range(3))
    print(f"the chain of three built-ins adds {cost:.1f} us of CPU per request")
    with tempfile.TemporaryDirectory() as root:
        write_site(Path(root), args.pages)
        with served(STATIC, root) as url:
            runs: dict[str, list[tuple[float, float]]] = {"none": [], "three built-ins": []}
            for _ in range(args.rounds):
                runs["none"].append(asyncio.run(crawl(url, args.concurrency)))
                runs["three built-ins"].append(
                    asyncio.run(crawl(url, args.concurrency, **BUILT_INS))
                )
    base = [statistics.median(r[i] for r in runs["none"]) for i in (0, 1)]
    for name, results in runs.items():
        rate, cpu = (statistics.median(r[i] for r in results) for i in (0, 1))
        print(
            f"{name:16} {rate:7.1f} pages/s ({100 * (rate - base[0]) / base[0]:+.1f}%), "
            f"{cpu:.3f} CPU ms/page ({100 * (cpu - base[1]) / base[1]:+.1f}%)  "
            f"runs: {', '.join(f'{r:.0f}' for r, _ in results)}"
        )


if __name__ == "__main__":
    main()
