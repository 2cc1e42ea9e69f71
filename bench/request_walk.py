"""A request's walk through netdisco's modules, from ``Spider.start`` to the written item.

    .venv/bin/python bench/request_walk.py [--trace]

Crawls one page (one item, no links) from a server on loopback, with one worker, and
records every call and return whose code lies in the ``netdisco`` package while the
request is in flight: from the spider's ``start`` to the moment the JSON-lines pipeline
has the item. Each asyncio task's events are kept apart and read one task after another,
in the order the tasks first ran, as a reader follows the request.

A *stay* is a run of events in one module; a *return* is a stay in a module the walk had
already left. ``leaf calls`` are stays in a module that calls no other netdisco module
before returning (a helper, read at a glance); the *reading walk* counts stays without
them. The same script runs on any netdisco checkout (its own venv), for an A/B.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from types import FrameType
from typing import Any

from aiohttp import web

import netdisco
from netdisco import Crawler, JsonLinesPipeline, Request, Response, Settings, Spider

PACKAGE = Path(netdisco.__file__).resolve().parent
PAGE = "<html><body><div class='product'><h1 class='product-title'>One</h1></div></body></html>"

#: (task id, module) of every netdisco call and return while the request is in flight
events: list[tuple[int, str]] = []
recording = False


def module_of(frame: FrameType) -> str | None:
    path = Path(frame.f_code.co_filename)
    if not path.is_relative_to(PACKAGE):
        return None
    return str(path.relative_to(PACKAGE).with_suffix("")).replace("/", ".")


def profile(frame: FrameType, event: str, arg: Any) -> None:
    if not recording or event not in ("call", "return"):
        return
    if event == "return":  # the module we are back in is the caller's
        frame = frame.f_back  # type: ignore[assignment]
        if frame is None:
            return
    if (module := module_of(frame)) is None:
        return
    try:
        task = id(asyncio.current_task())
    except RuntimeError:
        task = 0
    events.append((task, module))


class WalkSpider(Spider):
    name = "walk"

    def __init__(self, url: str) -> None:
        super().__init__()
        self.url = url

    async def start(self) -> AsyncIterator[Request]:
        global recording
        recording = True
        yield Request(self.url, callback=self.parse)

    def parse(self, response: Response) -> Iterator[dict[str, Any]]:
        yield {"title": response.css("h1.product-title::text").get()}


class Written(JsonLinesPipeline):
    def process(self, item: Any) -> None:
        global recording
        super().process(item)
        recording = False  # the item is with the pipeline that writes it


def stays(walk: list[str]) -> list[str]:
    """Consecutive events in one module are one stay."""
    out: list[str] = []
    for module in walk:
        if not out or out[-1] != module:
            out.append(module)
    return out


def reading(walk: list[str]) -> list[str]:
    """The stays without leaf calls: in A, B, A the stay in B called nothing else."""
    kept = [
        module
        for i, module in enumerate(walk)
        if not (0 < i < len(walk) - 1 and walk[i - 1] == walk[i + 1])
    ]
    return stays(kept)


def summary(name: str, walk: list[str]) -> str:
    seen: set[str] = set()
    returns = 0
    for i, module in enumerate(walk):
        if module in seen and walk[i - 1] != module:
            returns += 1
        seen.add(module)
    return f"{name}: {len(walk)} stays in {len(seen)} modules, {returns} returns"


async def main(trace: bool) -> None:
    app = web.Application()
    app.router.add_get("/", lambda _: web.Response(text=PAGE, content_type="text/html"))
    app.router.add_get("/robots.txt", lambda _: web.Response(text="User-agent: *\nAllow: /\n"))
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(concurrency=1, progress_interval=0, obey_robots=True)
        spider = WalkSpider(f"http://127.0.0.1:{port}/")
        crawler = Crawler(spider, settings, pipelines=[Written(f"{tmp}/items.jsonl")])
        sys.setprofile(profile)
        try:
            await crawler.run()
        finally:
            sys.setprofile(None)
    await runner.cleanup()
    order = list(dict.fromkeys(task for task, _ in events))
    walk = [module for task in order for t, module in events if t == task]
    full, read = stays(walk), reading(stays(walk))
    print(f"netdisco {netdisco.__version__} at {PACKAGE}, {len(order)} tasks")
    print(summary("every stay", full))
    print(summary("reading walk (leaf calls folded)", read))
    if trace:
        print(" -> ".join(read))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trace", action="store_true", help="print the reading walk")
    asyncio.run(main(parser.parse_args().trace))
