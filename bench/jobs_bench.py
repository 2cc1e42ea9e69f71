"""What a job's child process costs over an in-process spider, and how fast its log flows.

    PYTHONPATH=. .venv/bin/python bench/jobs_bench.py [--runs 7] [--lines 200000]

1. Start-up: from starting the child (``JobProcess.start``) to its first status line
   saying ``running``, against ``Crawler.start`` of the same spider in this process;
   interleaved runs. RSS: the child's VmRSS while running (the whole cost of the job,
   since the engine's own memory does not grow with it), against the growth of this
   process's RSS for one in-process crawler.
2. The log: a child that writes ``--lines`` JSON lines to stderr as fast as it can,
   through the engine's pipe reader and ``LogWriter`` (lines/s ingested), and the same
   file read back by ``follow`` while it is written (lines/s streamed).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from netdisco.cluster.jobs import Job
from netdisco.crawl.crawler import Crawler
from netdisco.engine.joblog import LogWriter, follow
from netdisco.engine.jobs import JobProcess
from tests.netdisco.engine_site import site_spider, start_site

WALK = "tests.monitor.job_spiders:Walk"


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process so far (a loaded machine's wall time is noise)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_kib(pid: str | int = "self") -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


async def child_start(base: str, directory: Path) -> tuple[float, int, float]:
    job = Job(id="0123456789ab", spider=WALK, args={"site": base, "speed": "slow"},
              settings={"concurrency": "1", "download_delay": "1"})  # fmt: skip
    spec = {"job": job.to_dict(), "engine_id": "bench", "spider_modules": ["tests.monitor"],
            "status_interval": 0.01}  # fmt: skip
    process = JobProcess(job, directory, spec, 10 * 1024 * 1024)
    began = time.perf_counter()
    await process.start()
    while process.status.get("state") != "running":  # noqa: ASYNC110 - the child's status
        await asyncio.sleep(0.002)
    elapsed = time.perf_counter() - began
    assert process.proc is not None
    rss, cpu = rss_kib(process.proc.pid), cpu_seconds(process.proc.pid)
    process.terminate(0.1)
    await process.wait()
    return elapsed, rss, cpu


async def in_process_start(base: str) -> tuple[float, int]:
    before = rss_kib()
    began = time.perf_counter()
    crawler = Crawler(site_spider("walk", base, "slow"), {"download_delay": 1, "concurrency": 1})
    await crawler.start()
    elapsed = time.perf_counter() - began
    grown = rss_kib() - before
    await crawler.stop(0.1)
    return elapsed, grown


async def log_rate(lines: int, directory: Path) -> tuple[float, float]:
    """Lines/s from a child's stderr into the log file, and out of it through ``follow``."""
    line = '{"event": "x", "n": %d, "pad": "%s"}\\n'
    code = f"import sys\nfor n in range({lines}):\n    sys.stderr.write('{line}' % (n, 'p' * 80))"
    directory.mkdir(parents=True, exist_ok=True)  # noqa: ASYNC240 - before anything runs
    process = JobProcess(Job(id="0123456789ac", spider=WALK), directory, {}, 1 << 30)
    process.log_path.touch()
    ended = False
    streamed = 0
    began = time.perf_counter()

    async def read() -> float:
        nonlocal streamed
        async for chunk in follow(process.log_path, 0, lambda: ended, poll=0.01):
            streamed += chunk.count(b"\n")
        return time.perf_counter() - began

    reader = asyncio.create_task(read())
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", code, stderr=asyncio.subprocess.PIPE
    )
    assert proc.stderr is not None
    await process._read_log(proc.stderr, LogWriter(process.log_path, 1 << 30))
    await proc.wait()
    ingest = time.perf_counter() - began
    ended = True
    stream = await reader
    assert streamed == lines, streamed
    return lines / ingest, streamed / stream


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--lines", type=int, default=200_000)
    args = parser.parse_args()
    runner, base = await start_site()
    child: list[tuple[float, int, float]] = []
    inside: list[tuple[float, int]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in range(args.runs):
            child.append(await child_start(base, Path(tmp) / f"c{n}"))
            inside.append(await in_process_start(base))
        rates = [await log_rate(args.lines, Path(tmp) / f"log{n}") for n in range(3)]
    await runner.cleanup()

    def show(label: str, values: list[float], unit: str) -> None:
        print(f"{label}: median {statistics.median(values):.3f} {unit} "
              f"(range {min(values):.3f}-{max(values):.3f}, {len(values)} runs)")  # fmt: skip

    show("child start-up", [c[0] for c in child], "s")
    show("child start-up CPU", [c[2] for c in child], "s")
    show("in-process start", [c[0] for c in inside], "s")
    show("child RSS", [c[1] / 1024 for c in child], "MiB")
    show("in-process RSS growth", [c[1] / 1024 for c in inside], "MiB")
    show("log ingested", [r[0] for r in rates], "lines/s")
    show("log streamed (follow)", [r[1] for r in rates], "lines/s")


if __name__ == "__main__":
    asyncio.run(main())
