"""Shared by the local benchmark scripts: a loopback server in its own process, RSS sampling."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from netdisco.testing import free_port, wait_port

SERVER = """
import sys
from aiohttp import web
import importlib.util
spec = importlib.util.spec_from_file_location("site", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
web.run_app(module.app(*sys.argv[4:]), host="127.0.0.1", port=int(sys.argv[2]), access_log=None,
            print=None)
"""


@contextlib.contextmanager
def served(module: Path, *args: str) -> Iterator[str]:
    """Run ``module.app(*args)`` in a process of its own (the crawl keeps this one)."""
    port = free_port()
    process = subprocess.Popen([sys.executable, "-c", SERVER, str(module), str(port), "-", *args])
    try:
        wait_port("127.0.0.1", port)
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait()


def tree_rss(pid: int) -> int:
    """Resident bytes of ``pid`` and every process descending from it (Chromium's too)."""
    parents: dict[int, int] = {}
    rss: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents[int(entry.name)] = int(fields[1])
        rss[int(entry.name)] = int(fields[21]) * 4096
    total, stack = 0, [pid]
    while stack:
        current = stack.pop()
        total += rss.get(current, 0)
        stack.extend(child for child, parent in parents.items() if parent == current)
    return total


async def sample_peak(pid: int, peak: list[int], interval: float = 0.25) -> None:
    """Keep ``peak[0]`` at the largest tree RSS seen, until cancelled."""
    while True:
        peak[0] = max(peak[0], await asyncio.to_thread(tree_rss, pid))
        await asyncio.sleep(interval)
