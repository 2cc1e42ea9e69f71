"""Interleaved A/B of benchmark crawlers by CPU per page, for a loaded machine.

    python3 bench/cpu_ab.py --start-url http://127.0.0.1:18571/index.html --rounds 3 \\
        base='/tmp/base/.venv/bin/python /tmp/base/bench/netdisco_crawler.py' \\
        new='.venv/bin/python bench/netdisco_crawler.py'

Each round runs every command once, in order (A B, A B, ...), each with the harness's
arguments (``--start-url --concurrency --out``), and prints one JSON line per crawl:
pages, wall seconds, pages/s, CPU ms a page (user+sys of the crawler and its children)
and the load average; then the medians with their ranges. Wall-clock rates on a shared
machine swing by 2x; CPU a page moves far less, which is why this exists beside
``make bench`` (which also verifies every item).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shlex
import statistics
import subprocess
import tempfile
import time
from typing import Any


def crawl(command: str, start_url: str, concurrency: int) -> dict[str, Any]:
    """One crawl; its CPU from this process's children usage before and after."""
    with tempfile.TemporaryDirectory() as tmp:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.monotonic()
        args = ["--start-url", start_url, "--concurrency", str(concurrency)]
        done = subprocess.run(
            [*shlex.split(command), *args, "--out", os.path.join(tmp, "items.jsonl")],
            capture_output=True,
            text=True,
            check=True,
        )
        wall = time.monotonic() - started
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    result = next(
        json.loads(line.removeprefix("BENCH_RESULT "))
        for line in done.stdout.splitlines()
        if line.startswith("BENCH_RESULT ")
    )
    pages = int(result["pages"])
    return {
        "pages": pages,
        "wall": round(wall, 2),
        "pages_s": round(pages / wall, 1),
        "cpu_ms": round(1000 * cpu / max(pages, 1), 3),
        "load1": round(os.getloadavg()[0], 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--start-url", required=True)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("crawlers", nargs="+", metavar="NAME=COMMAND")
    args = parser.parse_args()
    crawlers = dict(spec.split("=", 1) for spec in args.crawlers)
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in crawlers}
    for _ in range(args.rounds):
        for name, command in crawlers.items():
            run = crawl(command, args.start_url, args.concurrency)
            runs[name].append(run)
            print(json.dumps({"crawler": name, **run}), flush=True)
    for name, rows in runs.items():
        summary = {
            key: f"{statistics.median(r[key] for r in rows)} "
            f"[{min(r[key] for r in rows)}-{max(r[key] for r in rows)}]"
            for key in ("pages_s", "cpu_ms", "load1")
        }
        print(f"{name}: " + ", ".join(f"{k} {v}" for k, v in summary.items()))


if __name__ == "__main__":
    main()
