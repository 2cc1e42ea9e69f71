"""A feed as an item pipeline: it subscribes to the spider's item stream like any other.

``prepare`` (called when the spider starts, before anything is fetched) fills in the
URI template, creates missing directories and opens the file once, so a feed that
cannot be written fails the start with a ``FeedError`` naming the path rather than
after a crawl's worth of items. Every item (or batch) is handed to the operating
system as it is written (a killed process loses none); ``flush`` is awaitable and
explicit and also syncs to disk; ``close`` (when the spider stops) flushes and closes.
"""

from __future__ import annotations

import socket
import sqlite3
import sys
import time
from pathlib import Path
from typing import IO, Any

from netdisco.crawl.feeds.spec import FeedSpec
from netdisco.crawl.feeds.warc import WarcWriter
from netdisco.crawl.feeds.writers import (
    CsvWriter,
    JsonWriter,
    SqliteWriter,
    TextWriter,
    Writer,
    existing_header,
)
from netdisco.crawl.pipelines import Pipeline
from netdisco.crawl.request import Request
from netdisco.crawl.response import Response
from netdisco.exceptions import FeedError

_TEXT_WRITERS: dict[str, type[TextWriter]] = {"jsonl": TextWriter, "json": JsonWriter}


def fill_template(template: str, *, spider: str, engine: str, now: float) -> str:
    """``{spider}``, ``{engine}`` and ``{time}`` (UTC, safe in file names) filled in."""
    stamp = time.strftime("%Y-%m-%dT%H-%M-%SZ", time.gmtime(now))
    return template.format(spider=spider, engine=engine, time=stamp)


def feed_path(spec: FeedSpec, *, spider: str, engine: str, now: float) -> str:
    """The file ``spec`` writes to now; with a ``root``, a path that (symbolic links
    resolved) leaves it is a FeedError."""
    path = fill_template(spec.path, spider=spider, engine=engine, now=now)
    if spec.root is not None:
        root = Path(spec.root).resolve()
        if not Path(path).resolve().is_relative_to(root):
            raise FeedError(f"feed {path!r} is not under {str(root)!r} (engine.feeds_dir)")
    return path


class FeedPipeline(Pipeline):
    """Writes a spider's items to one feed; see the module docstring."""

    def __init__(
        self, spec: FeedSpec, *, spider: str, engine: str, columns: tuple[str, ...] = ()
    ) -> None:
        self.spec = spec
        self.columns = spec.fields or columns  # declared, else the item schema's fields
        self.spider = spider
        self.engine = engine
        self.target: str | None = None  # the path, once the template is filled in
        self._writer: Writer | None = None
        self.written = 0  # items (a WARC feed: records) written, for the closing summary

    def counts(self) -> dict[str, int]:
        """What the closing summary says the feed holds: its items."""
        return {"items": self.written}

    def prepare(self) -> None:
        """Fill in the template and check that the feed can be written (see module doc)."""
        if self.target is not None or self.spec.stdout:
            return
        path = feed_path(self.spec, spider=self.spider, engine=self.engine, now=time.time())
        try:
            _make_parents(Path(path))
            if self.spec.format == "sqlite":
                sqlite3.connect(path).close()
            else:
                Path(path).open("a", encoding="utf-8").close()
        except (OSError, sqlite3.Error) as exc:
            raise FeedError(f"feed {path!r} cannot be written: {_reason(exc)}") from exc
        self.target = path

    async def open(self) -> None:
        self.prepare()
        try:
            self._writer = self._make_writer()
        except (OSError, sqlite3.Error) as exc:
            raise FeedError(f"feed {self.target!r} cannot be written: {_reason(exc)}") from exc

    def _make_writer(self) -> Writer:
        spec = self.spec
        if spec.format == "sqlite":
            assert self.target is not None
            return SqliteWriter(
                self.target, self.spider, fields=self.columns, overwrite=spec.overwrite
            )
        stream, owned = self._stream()
        if spec.format == "csv":
            fields = list(self.columns)
            appending = owned and not spec.overwrite and stream.tell() > 0
            if appending and not fields:
                assert self.target is not None
                fields = existing_header(self.target)
            return CsvWriter(stream, owned=owned, fields=fields, header=not appending)
        return _TEXT_WRITERS[spec.format](stream, owned=owned)

    def _stream(self) -> tuple[IO[str], bool]:
        if self.target is None:
            return sys.stdout, False
        mode = "w" if self.spec.overwrite else "a"
        return open(self.target, mode, encoding="utf-8", newline=""), True

    def process(self, item: Any) -> None:
        if self._writer is None:
            raise FeedError(f"feed {self.spec.uri!r} was not opened")
        for one in item if isinstance(item, list) else (item,):
            self._writer.write(one)
            self.written += 1
        self._writer.flush(sync=False)  # to the OS: a killed process loses nothing written

    async def flush(self) -> None:
        if self._writer is not None:
            self._writer.flush()

    async def close(self) -> None:
        if self._writer is not None:
            writer, self._writer = self._writer, None
            writer.close()


class WarcFeed(FeedPipeline):
    """A ``warc`` feed: the hops ``WarcMiddleware`` hands it, not items (``feeds.warc``)."""

    def __init__(self, spec: FeedSpec, *, spider: str, engine: str, max_size: int) -> None:
        super().__init__(spec, spider=spider, engine=engine)
        self.max_size = max_size
        self.warc: WarcWriter | None = None
        self.responses = 0  # hops archived; ``written`` counts WARC records, not items

    async def open(self) -> None:
        self.prepare()
        assert self.target is not None
        self.warc = WarcWriter(self.target, max_size=self.max_size, overwrite=self.spec.overwrite)
        self.written = self.warc.records

    def archive(self, request: Request, response: Response) -> None:
        """Write one hop (before ``open`` or after ``close``: nothing to write to)."""
        if self.warc is not None:
            self.warc.write(request, response)
            self.written = self.warc.records
            self.responses += 1

    def counts(self) -> dict[str, int]:
        """WARC records (a warcinfo per file, a request and a response or revisit per
        hop), not items."""
        return {"records": self.written, "responses": self.responses}

    def process(self, item: Any) -> None:
        """Items do not go into a WARC file."""

    async def flush(self) -> None:
        if self.warc is not None:
            self.warc.flush()

    async def close(self) -> None:
        if self.warc is not None:
            warc, self.warc = self.warc, None
            warc.close()


def _make_parents(path: Path) -> None:
    """Create the directories a feed's file goes in; a file in the way is named."""
    for parent in reversed(path.parents):
        if parent.exists() and not parent.is_dir():
            raise NotADirectoryError(0, f"{parent} is not a directory")
    path.parent.mkdir(parents=True, exist_ok=True)


def _reason(exc: BaseException) -> str:
    return exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)


def feed_pipelines(
    specs: tuple[FeedSpec, ...],
    *,
    spider: str,
    engine: str | None,
    warc_max_size: int = 0,
    columns: tuple[str, ...] = (),
) -> list[FeedPipeline]:
    """One pipeline per feed of a spider; ``{engine}`` is the host name when None;
    ``columns`` (the item schema's fields) for CSV and SQLite feeds that declare none."""
    name = engine or socket.gethostname()
    return [
        WarcFeed(spec, spider=spider, engine=name, max_size=warc_max_size)
        if spec.format == "warc"
        else FeedPipeline(spec, spider=spider, engine=name, columns=columns)
        for spec in specs
    ]
