"""HTTP helpers for tests: serve an aiohttp app on loopback, write a static site to disk."""

from __future__ import annotations

import contextlib
import random
from collections.abc import AsyncIterator
from pathlib import Path

from aiohttp import web


@contextlib.asynccontextmanager
async def serve(app: web.Application, host: str = "127.0.0.1") -> AsyncIterator[str]:
    """Serve ``app`` on a free loopback port inside the running loop; yields its base URL."""
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
    await runner.setup()
    await web.TCPSite(runner, host, 0).start()
    try:
        yield f"http://{host}:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()


def write_site(root: Path, pages: int, *, seed: int = 1, links: int = 6) -> Path:
    """A deterministic site of ``pages`` HTML pages under ``root``, all reachable from
    ``/index.html``: page j > 0 is linked from a random earlier page, and every page has
    ``links`` more random in-site links (some with a fragment), an off-site link and a
    ``mailto:`` that crawlers must drop.
    """
    rng = random.Random(seed)
    paths = ["/index.html", *(f"/p/{n // 100:03d}/page-{n:05d}.html" for n in range(1, pages))]
    outgoing: list[list[int]] = [[] for _ in range(pages)]
    for child in range(1, pages):
        outgoing[rng.randrange(child)].append(child)
    for number, path in enumerate(paths):
        targets = outgoing[number] + [rng.randrange(pages) for _ in range(links)]
        anchors = "".join(
            f'<a href="{paths[t]}{"#top" if t % 3 == 0 else ""}">{t}</a>\n' for t in targets
        )
        body = (
            f"<html><head><title>page {number}</title></head><body>"
            f'<div class="product"><h1 class="product-title">Item {number}</h1></div>\n'
            f'{anchors}<a href="http://offsite.invalid/x">away</a> '
            '<a href="mailto:someone@example.org">mail</a></body></html>\n'
        )
        target = root / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(body, encoding="utf-8")
    return root
