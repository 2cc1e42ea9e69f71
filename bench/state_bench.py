"""What does ``state_dir`` cost? (a benchmark, not a test)

1. The same crawl of a generated loopback site (``netdisco.testing.write_site``, served
   from memory by an aiohttp server in its own process) with the memory frontier and
   with ``state_dir``, alternating, each in a fresh child process: pages/s and peak RSS.
2. A 1,000,000-URL seen set in SQLite (the table ``state_dir`` uses): bytes on disk per
   URL, inserts/s (in the frontier's batches of 8) and lookups/s (half of them misses).

    .venv/bin/python bench/state_bench.py --pages 20000 --rounds 3 --seen 1000000
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import random
import resource
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from pages import load_pages, serve_pages

from netdisco import Crawler, Response, Settings, Spider
from netdisco.frontiers.sqlite import Store
from netdisco.testing import free_port, wait_port, write_site


class Bench(Spider):
    name = "bench"
    allowed_domains = ("127.0.0.1",)

    def parse(self, response: Response) -> Any:
        yield {"url": response.url, "title": response.css("title::text").get()}
        for href in response.css("a::attr(href)").getall():
            yield response.follow(href, callback=self.parse)


async def crawl(base: str, state_dir: str | None, output: str) -> dict[str, Any]:
    from netdisco.crawl.pipelines import JsonLinesPipeline

    settings = Settings(
        concurrency=32,
        per_host_concurrency=32,
        obey_robots=False,
        progress_interval=0,
        retries=0,
        state_dir=state_dir,
    )
    crawler = Crawler(
        Bench(start_urls=[f"{base}/index.html"]), settings, pipelines=[JsonLinesPipeline(output)]
    )
    began = time.perf_counter()
    await crawler.run()
    elapsed = time.perf_counter() - began
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return {
        "pages": crawler.stats.succeeded,
        "pages_per_second": crawler.stats.succeeded / elapsed,
        "cpu_ms_per_page": (usage.ru_utime + usage.ru_stime) * 1000 / crawler.stats.succeeded,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "state": crawler.state.value,
    }


def one_run(base: str, persistent: bool, work: Path) -> dict[str, Any]:
    state = work / "state"
    shutil.rmtree(state, ignore_errors=True)
    output = work / "items.jl"
    output.unlink(missing_ok=True)
    argv = [sys.executable, __file__, "--child", base, str(output)]
    if persistent:
        argv.append(str(state))
    done = subprocess.run(argv, capture_output=True, text=True, check=True)
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    result["frontier"] = "state_dir" if persistent else "memory"
    if persistent:
        result["state_mb"] = sum(f.stat().st_size for f in state.iterdir()) / 1e6
    return result


def crawl_bench(args: argparse.Namespace, work: Path) -> None:
    site = write_site(work / "site", args.pages)
    port = free_port()
    server = subprocess.Popen([sys.executable, __file__, "--serve", str(site), str(port)])
    try:
        wait_port("127.0.0.1", port)
        base = f"http://127.0.0.1:{port}"
        runs = [
            one_run(base, persistent, work)
            for _ in range(args.rounds)
            for persistent in (False, True)
        ]
    finally:
        server.terminate()
        server.wait(10)
    for run in runs:
        print(json.dumps(run))
    for kind in ("memory", "state_dir"):
        mine = [r for r in runs if r["frontier"] == kind]
        rates = sorted(r["pages_per_second"] for r in mine)
        cpu = sorted(r["cpu_ms_per_page"] for r in mine)
        rss = max(r["peak_rss_mb"] for r in mine)
        print(
            f"{kind:9}  median {rates[len(mine) // 2]:7.0f} pages/s"
            f" ({rates[0]:.0f}-{rates[-1]:.0f})"
            f"  CPU {cpu[len(mine) // 2]:.2f} ms/page ({cpu[0]:.2f}-{cpu[-1]:.2f})"
            f"  peak RSS {rss:6.1f} MB"
        )
    ratios = sorted(
        b["pages_per_second"] / a["pages_per_second"]
        for a, b in zip(runs[::2], runs[1::2], strict=True)
    )
    print(
        f"state_dir/memory per round: median {ratios[len(ratios) // 2]:.2f}x "
        f"({ratios[0]:.2f}-{ratios[-1]:.2f})"
    )


def seen_bench(count: int, work: Path) -> None:
    directory = work / "seen"
    store = Store(directory, "bench")
    store.open()
    fingerprints = [hashlib.sha1(f"url-{n}".encode()).digest()[:16] for n in range(count)]
    began = time.perf_counter()
    for start in range(0, count, 8):  # a page's new links, as the frontier adds them
        batch = fingerprints[start : start + 8]
        store.insert([(fp, False, 0, "{}") for fp in batch])
        if start % 8192 == 0:
            store.commit([], {})
    store.commit([], {})
    inserts = count / (time.perf_counter() - began)
    store.close()
    db = sqlite3.connect(directory / "frontier.sqlite")
    db.execute("DELETE FROM queue")
    db.commit()
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.execute("VACUUM")
    size = (directory / "frontier.sqlite").stat().st_size
    half = min(100_000, count)
    probes = random.sample(fingerprints, half) + [os.urandom(16) for _ in range(half)]
    random.shuffle(probes)
    began = time.perf_counter()
    hits = sum(
        1 for fp in probes if db.execute("SELECT 1 FROM seen WHERE fp = ?", (fp,)).fetchone()
    )
    lookups = len(probes) / (time.perf_counter() - began)
    db.close()
    assert hits == half
    print(
        f"seen set of {count:,} URLs: {size / count:.1f} bytes/URL on disk, "
        f"{inserts:,.0f} inserts/s, {lookups:,.0f} lookups/s"
    )


def main() -> None:
    if sys.argv[1:2] == ["--child"]:
        base, output = sys.argv[2], sys.argv[3]
        state = sys.argv[4] if len(sys.argv) > 4 else None
        print(json.dumps(asyncio.run(crawl(base, state, output))))
        return
    if sys.argv[1:2] == ["--serve"]:
        asyncio.run(serve_pages(load_pages(Path(sys.argv[2])), int(sys.argv[3])))
        return
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pages", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seen", type=int, default=1_000_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="state-bench-") as tmp:
        if args.pages:
            crawl_bench(args, Path(tmp))
        if args.seen:
            seen_bench(args.seen, Path(tmp))


if __name__ == "__main__":
    main()
