"""The workers' line to the crawl's process: items, counters, flushes, over a Unix socket.

Why the items travel to the parent rather than into part files merged at the end:
one writer per feed keeps every format whole as it is today (a JSON array, a CSV
header, SQLite, standard output), lines of two workers never interleave, the feed
grows while the crawl runs (``tail -f``), and a killed worker can leave no half line
behind (its unfinished messages are dropped with its connection).

Each message is one JSON line. A worker sends ``{"h": owner}`` first, then
``{"i": item, "p": page}`` for each item of the page ``p`` (its fingerprint in
hex), ``{"e": page}`` once that page's callback is done, ``{"s": snapshot}`` (its
``Stats.snapshot``, twice a second and at its end, with ``"state"`` then) and
``{"f": n}`` to flush: the parent writes the feeds out and answers ``{"f": n}``;
the worker acknowledges its pages to the frontier only after that (at-least-once,
as in one process).

A page's items are written together once its ``e`` arrives. When a worker dies, the
pages it had not finished are dropped, and the pages it finished last (the ones it
may not have acknowledged yet) are remembered: whoever fetches one of them again
has its items dropped as duplicates, so a ``kill -9`` of a worker neither loses nor
repeats an item. ``RECENT_PAGES`` bounds that memory.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import structlog

from netdisco.crawl.feeds.pipeline import FeedPipeline
from netdisco.crawl.pipelines import Pipeline, to_jsonable

log = structlog.get_logger(__name__)

#: the longest message (one item), bytes; a longer item fails in the worker's pipeline
MAX_LINE = 16 * 1024 * 1024
#: pages a worker finished that are remembered after it died (it acknowledges in batches
#: of at most ``flush_items``, every ``flush_interval``: far fewer are unacknowledged)
RECENT_PAGES = 20_000


@dataclass
class Page:
    """The page a worker task is scraping: its fingerprint, and whether items went out."""

    key: str
    sent: bool = False


#: the page the current task scrapes (set by the worker's crawler around each request)
CURRENT: contextvars.ContextVar[Page | None] = contextvars.ContextVar("page", default=None)


def encode(message: dict[str, Any]) -> bytes:
    """One message as a JSON line (what ``json`` cannot write goes as a string)."""
    return json.dumps(message, ensure_ascii=False, default=str).encode() + b"\n"


class ParentLink(Pipeline):
    """The worker's end: a pipeline whose items go to the parent (the feeds), and the
    counters and flushes. ``lost`` is set when the parent's end closes."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self._sequence = 0
        self._flushed: dict[int, asyncio.Future[None]] = {}
        self.lost = asyncio.Event()

    def send(self, message: dict[str, Any]) -> None:
        """Queue one message (the socket's buffer; ``flush`` drains it)."""
        line = encode(message)
        if len(line) > MAX_LINE:
            raise ValueError(f"an item of {len(line)} bytes is larger than {MAX_LINE}")
        self.writer.write(line)

    def process(self, item: Any) -> None:
        page = CURRENT.get()
        self.send({"i": to_jsonable(item), "p": page.key if page else None})
        if page is not None:
            page.sent = True

    def page_done(self, page: Page) -> None:
        """The page's callback ended: its items may be written."""
        if page.sent:
            self.send({"e": page.key})

    async def flush(self) -> None:
        """Return once the parent wrote every item sent so far to the feeds."""
        self._sequence += 1
        done = self._flushed[self._sequence] = asyncio.get_running_loop().create_future()
        self.send({"f": self._sequence})
        await self.writer.drain()
        lost = asyncio.ensure_future(self.lost.wait())
        try:
            await asyncio.wait([done, lost], return_when=asyncio.FIRST_COMPLETED)
        finally:
            lost.cancel()
        if not done.done():
            raise ConnectionError("the crawl's process is gone")

    async def read_replies(self) -> None:
        """Resolve flushes as the parent answers them; set ``lost`` at its end."""
        try:
            while line := await self.reader.readline():
                number = json.loads(line).get("f")
                for key in [key for key in self._flushed if key <= number]:
                    future = self._flushed.pop(key)
                    if not future.done():
                        future.set_result(None)
        finally:
            self.lost.set()


@dataclass
class Worker:
    """What the parent knows of one worker process, by its connection."""

    owner: str = ""
    snapshot: dict[str, Any] = field(default_factory=dict)
    state: str | None = None
    pending: dict[str, list[Any]] = field(default_factory=dict)
    recent: deque[str] = field(default_factory=lambda: deque(maxlen=RECENT_PAGES))


class Sink:
    """The parent's end: writes the workers' pages into the feeds, each page once."""

    def __init__(self, feeds: Sequence[FeedPipeline]) -> None:
        self.feeds = list(feeds)
        self.workers: list[Worker] = []
        self.duplicates = 0  # pages whose items a dead worker had written already
        self._done_by_dead: set[str] = set()

    def lost(self, worker: Worker) -> None:
        """``worker`` died: drop its unfinished pages, remember its last finished ones."""
        worker.pending.clear()
        worker.snapshot["in_flight"] = 0  # its last snapshot's requests are back in the queue
        worker.snapshot["hosts"] = []
        self._done_by_dead.update(worker.recent)
        worker.recent.clear()

    def _write(self, items: list[Any]) -> None:
        for item in items:
            for feed in self.feeds:
                feed.process(item)

    def _end(self, worker: Worker, key: str) -> None:
        items = worker.pending.pop(key, [])
        if key in self._done_by_dead:
            self.duplicates += 1
            log.info("duplicate_page_dropped", page=key, items=len(items))
            return
        worker.recent.append(key)
        self._write(items)

    async def handle(self, worker: Worker, message: Any, writer: asyncio.StreamWriter) -> None:
        """One message of ``worker``; an unknown or malformed one is refused (ValueError)."""
        if not isinstance(message, dict) or len(message) not in (1, 2):
            raise ValueError("a message is a JSON object of one or two keys")
        if "i" in message:
            page = message.get("p")
            if page is None:
                self._write([message["i"]])
            else:
                worker.pending.setdefault(str(page), []).append(message["i"])
        elif "e" in message:
            self._end(worker, str(message["e"]))
        elif "s" in message and isinstance(message["s"], dict):
            worker.snapshot = message["s"]
            worker.state = str(message.get("state") or "") or None
        elif "f" in message and isinstance(message["f"], int):
            for feed in self.feeds:
                await feed.flush()
            writer.write(encode({"f": message["f"]}))
        elif "h" in message:
            worker.owner = str(message["h"])[:200]
        else:
            raise ValueError(f"unknown message {sorted(message)}")
