"""One worker process of a ``-j N`` crawl: ``python -m netdisco.procs.worker CONFIG``.

``CONFIG`` is the JSON the parent wrote (``WorkerConfig``). The worker loads the
spider and its settings as ``netdisco crawl`` does (the same arguments, the same
environment), crawls from the shared frontier under its own lease owner, and sends
its items, counters and flushes to the parent (``channel``). SIGTERM stops it
gracefully (its leases go back); SIGINT is the parent's to handle. When the parent's
end of the socket closes, the worker ends at once: nothing it holds is lost, as the
frontier gives its leases back.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import os
import signal
import sys
from collections.abc import Iterator

from netdisco import logs
from netdisco._tasks import Tasks
from netdisco.crawl.crawler import Crawler, SpiderState
from netdisco.crawl.request import Request
from netdisco.crawl.workers import PageScope
from netdisco.procs.channel import CURRENT, MAX_LINE, Page, ParentLink

#: seconds between two counter snapshots sent to the parent
SNAPSHOT_INTERVAL = 0.5


@dataclasses.dataclass(frozen=True)
class WorkerConfig:
    """What the parent tells a worker: ``netdisco crawl``'s arguments and its part."""

    spider: str
    arg: list[str]
    set: list[str]
    config: str | None
    frontier: str
    owner: str
    socket: str
    max_pages: int
    feeds: bool
    log_json: bool
    log_level: str

    @classmethod
    def from_json(cls, text: str) -> WorkerConfig:
        """Our own parent wrote it; still, only the known keys are taken."""
        data = json.loads(text)
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{key: value for key, value in data.items() if key in names})


def page_scope(link: ParentLink) -> PageScope:
    """What each request is processed inside: the items it yields are of its page, and
    the parent is told once the page was handed to the acknowledgements."""

    @contextlib.contextmanager
    def scope(request: Request) -> Iterator[None]:
        page = Page(request.fingerprint.hex() or f"id{id(request)}")
        token = CURRENT.set(page)
        try:
            yield
        finally:  # no await since the page was handed to the acks: "e" goes before any flush
            CURRENT.reset(token)
            link.page_done(page)

    return scope


def _crawler(config: WorkerConfig, link: ParentLink) -> Crawler:
    from netdisco.cli import spider_and_settings  # the same loading as `netdisco crawl`

    args = argparse.Namespace(**dataclasses.asdict(config))
    spider, settings = spider_and_settings(args)
    settings = dataclasses.replace(
        settings,
        frontier=config.frontier,
        state_dir=None,
        feeds=(),
        progress_interval=0.0,
        max_pages=config.max_pages,
        processes=1,
    )
    pipelines = [link] if config.feeds else []
    return Crawler(
        spider, settings, pipelines=pipelines, owner=config.owner, page_scope=page_scope(link),
        scrapy_settings=args.scrapy_settings,  # a Scrapy project's, for its pipelines
    )  # fmt: skip


async def _snapshots(crawler: Crawler, link: ParentLink) -> None:
    while True:
        link.send({"s": crawler.stats.snapshot()})
        await asyncio.sleep(SNAPSHOT_INTERVAL)


async def _run(config: WorkerConfig) -> int:
    reader, writer = await asyncio.open_unix_connection(config.socket, limit=MAX_LINE)
    link = ParentLink(reader, writer)
    link.send({"h": config.owner})
    crawler = _crawler(config, link)
    tasks = Tasks()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, lambda: tasks.spawn(_stop(crawler), name="stop"))
    loop.add_signal_handler(signal.SIGINT, lambda: None)  # the parent forwards it as SIGTERM
    tasks.spawn(link.read_replies(), name="replies")
    orphaned = tasks.spawn(_orphaned(link), name="orphaned")
    await crawler.start()
    tasks.spawn(_snapshots(crawler, link), name="snapshots")
    await crawler.wait()
    orphaned.cancel()  # from here the parent closing its end is the normal end
    link.send({"s": crawler.stats.snapshot(), "state": crawler.state.value})
    await writer.drain()
    writer.close()
    await tasks.cancel_all(timeout=2.0)
    return 1 if crawler.state is SpiderState.FAILED else 0


async def _stop(crawler: Crawler) -> None:
    if crawler.state in (SpiderState.RUNNING, SpiderState.PAUSED):
        await crawler.stop()


async def _orphaned(link: ParentLink) -> None:
    """The parent died (its socket closed): end now; the frontier takes our leases back."""
    await link.lost.wait()
    os._exit(3)


def main(argv: list[str] | None = None) -> int:
    """Run the worker described by ``argv[0]`` (JSON); 0 when it ended normally."""
    config = WorkerConfig.from_json((argv or sys.argv[1:])[0])
    logs.configure(json=config.log_json, level=config.log_level)
    return asyncio.run(_run(config))


if __name__ == "__main__":
    sys.exit(main())
