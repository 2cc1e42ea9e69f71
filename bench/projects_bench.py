"""Deploy a 100 KB project through a monitor and install it, cold and warm uv cache.

Usage: .venv/bin/python bench/projects_bench.py [RUNS]

Starts ZooKeeper and a monitor on loopback; each run deploys a new version (a
different 100 KB of source, so a new hash) with ``netdisco deploy`` in-process, then
installs it twice into fresh venv caches: once with an empty uv cache (cold: every
wheel is fetched from PyPI), once with the cache the cold install filled (warm).
Cold and warm alternate within a run. Prints each figure and the medians (seconds).
"""

from __future__ import annotations

import asyncio
import os
import random
import statistics
import string
import sys
import tempfile
import time
from pathlib import Path

from kazoo.client import KazooClient

from monitor.config import load_config
from monitor.daemon import Monitor
from netdisco.cli import main
from netdisco.cluster.zk import close_client
from netdisco.projects import install
from netdisco.testing import ZooKeeperServer

SPIDER = "from netdisco import Spider\n\n\nclass Docs(Spider):\n    name = 'docs'\n"


def write_project(directory: Path, seed: int) -> None:
    """About 100 KB of Python in a package with one spider."""
    rng = random.Random(seed)
    package = directory / "bigproj"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "spiders.py").write_text(SPIDER)
    for index in range(10):
        words = "".join(rng.choice(string.ascii_letters) for _ in range(10_000))
        (package / f"data{index}.py").write_text(f"TEXT = {words!r}\n")
    (directory / "pyproject.toml").write_text('[project]\nname = "bigproj"\nversion = "1"\n')


async def install_timed(hosts: str, cache: Path, uv_cache: Path) -> float:
    os.environ["UV_CACHE_DIR"] = str(uv_cache)
    client = KazooClient(hosts=hosts)
    await asyncio.to_thread(client.start, 15)
    try:
        started = time.perf_counter()
        await install(client, "/netdiscovery", "bigproj", None, cache)
        return time.perf_counter() - started
    finally:
        await asyncio.to_thread(close_client, client)


async def bench(runs: int, work: Path) -> dict[str, list[float]]:
    zk = ZooKeeperServer()
    zk.start()
    overrides = {"zookeeper.hosts": zk.hosts, "http.port": 0, "http.poll_status": 0.0}
    monitor = Monitor(load_config(None, env={}, overrides=overrides))
    await monitor.start()
    times: dict[str, list[float]] = {"deploy": [], "install_cold": [], "install_warm": []}
    try:
        for run in range(runs):
            project = work / f"project{run}"
            write_project(project, run)
            started = time.perf_counter()
            args = ["deploy", str(project), "--monitor", monitor.http.url]
            assert await asyncio.to_thread(main, args) == 0
            times["deploy"].append(time.perf_counter() - started)
            uv_cache = work / f"uv{run}"
            for kind in ("cold", "warm"):
                cache = work / f"cache{run}{kind}"
                times[f"install_{kind}"].append(await install_timed(zk.hosts, cache, uv_cache))
            print(run, {k: round(v[-1], 2) for k, v in times.items()}, flush=True)
    finally:
        await monitor.close()
        zk.stop()
    return times


def main_bench() -> None:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    with tempfile.TemporaryDirectory(prefix="netdisco-projects-bench-") as work:
        times = asyncio.run(bench(runs, Path(work)))
    for name, values in times.items():
        print(f"{name}: median {statistics.median(values):.2f} s "
              f"(range {min(values):.2f}-{max(values):.2f}, n={len(values)})")  # fmt: skip


if __name__ == "__main__":
    main_bench()
