"""The benchmarks' site server: generated pages served from memory, optionally slowed down.

Run as its own process by the benchmarks so that serving does not share the crawler's
core: ``python bench/pages.py ROOT PORT [DELAY [HOSTS]]`` prints ``serving`` when ready.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Sequence
from pathlib import Path

from aiohttp import web


def load_pages(root: Path) -> dict[str, bytes]:
    """Every ``*.html`` under ``root`` by its URL path."""
    return {"/" + str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*.html")}


async def serve_pages(
    pages: dict[str, bytes], port: int, *, delay: float = 0.0, hosts: Sequence[str] = ("127.0.0.1",)
) -> None:
    """Serve ``pages`` (each after ``delay`` seconds) on ``port`` of every address, for ever."""

    async def handle(request: web.BaseRequest) -> web.StreamResponse:
        if delay:
            await asyncio.sleep(delay)
        body = pages.get(request.path)
        if body is None:
            return web.Response(status=404)
        return web.Response(body=body, content_type="text/html")

    runner = web.ServerRunner(web.Server(handle), access_log=None)
    await runner.setup()
    for address in hosts:
        await web.TCPSite(runner, address, port, backlog=4096).start()
    print("serving", flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    root, port = Path(sys.argv[1]), int(sys.argv[2])
    delay = float(sys.argv[3]) if len(sys.argv) > 3 else 0.0
    count = int(sys.argv[4]) if len(sys.argv) > 4 else 1
    addresses = [f"127.0.0.{n}" for n in range(1, count + 1)]
    asyncio.run(serve_pages(load_pages(root), port, delay=delay, hosts=addresses))
