"""A job's kept items: every item it yields, as JSON lines in its own directory, bounded.

A job keeps its items whether or not its spider declares a feed (Scrapyd keeps them in
its ``items_dir``): :class:`KeptItems` is one more pipeline of the job's crawl, writing
``<jobs_dir>/<id>/items.jsonl`` up to the engine's ``job_items_max`` and counting what
it drops past it. The engine reads the file back in pages and as a download (JSON
lines, or CSV with one column per top-level key); nothing from a request names a file.
"""

from __future__ import annotations

import asyncio
import csv
import io
import json
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import IO, Any

from netdisco.crawl.pipelines import Pipeline, json_line
from netdisco.engine.joblog import MAX_LINE

#: the kept items' file in a job's directory
ITEMS_FILE = "items.jsonl"
#: lines read between two yields to the loop while a download is written
BATCH = 1000
#: the most CSV columns (top-level keys) a download has; more keys are left out
MAX_COLUMNS = 1000


class KeptItems(Pipeline):
    """Writes each item to the job's ``items.jsonl`` while under ``most``; counts the rest."""

    def __init__(self, path: Path, most: int) -> None:
        self.path = path
        self.most = most
        self.kept = 0
        self.dropped = 0
        self._file: IO[str] | None = None

    async def open(self) -> None:
        """Create the file (empty when nothing is kept), so a page of none reads it."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = self.path.open("a", encoding="utf-8")

    def process(self, item: Any) -> None:
        """Keep one item, or count it as dropped past the bound."""
        if self._room():
            self._write(json_line(item))

    def process_line(self, line: str) -> None:
        """Keep one item already a JSON line (a command job's, checked as it came), or
        count it as dropped past the bound."""
        if self._room():
            self._write(line)

    def _room(self) -> bool:
        """Whether one more item is kept; if not, it is counted as dropped."""
        if self._file is None or self.kept >= self.most:
            self.dropped += 1
            return False
        return True

    def _write(self, line: str) -> None:
        assert self._file is not None
        self._file.write(line)
        self.kept += 1

    async def flush(self) -> None:
        """To the disk before the requests that yielded the items are acknowledged."""
        if self._file is not None:
            self._file.flush()
            os.fsync(self._file.fileno())

    async def close(self) -> None:
        """Flush and close."""
        if self._file is not None:
            await self.flush()
            self._file.close()
            self._file = None

    def counts(self) -> dict[str, int]:
        """What the job's status line reports."""
        return {"items_kept": self.kept, "items_dropped": self.dropped}


def items_path(directory: Path) -> Path | None:
    """A job's kept items file, or None when there is none or it leads out of the job's
    directory (a link the job's own code could have made)."""
    path = directory / ITEMS_FILE
    if not path.is_file() or not path.resolve().is_relative_to(directory.resolve()):
        return None
    return path


def _lines(f: IO[bytes], offset: int, limit: int | None) -> list[bytes]:
    """Up to ``limit`` (None: every) whole lines from ``offset`` on; a line over
    :data:`MAX_LINE` is skipped, never held whole."""
    found: list[bytes] = []
    for number, line in enumerate(f):
        if limit is not None and number >= offset + limit:
            break
        if number >= offset and len(line) <= MAX_LINE and line.endswith(b"\n"):
            found.append(line)
    return found


def page(path: Path, offset: int, limit: int) -> list[Any]:
    """Items ``offset`` to ``offset + limit`` as objects (a line that is not JSON: its text)."""
    with path.open("rb") as f:
        lines = _lines(f, offset, limit)
    items: list[Any] = []
    for line in lines:
        try:
            items.append(json.loads(line))
        except (ValueError, RecursionError):
            items.append(line.decode("utf-8", "replace").rstrip("\n"))
    return items


async def _batches(path: Path, offset: int, limit: int | None) -> AsyncIterator[list[bytes]]:
    """The lines of a download, :data:`BATCH` at a time, yielding to the loop between."""
    left = limit
    with path.open("rb") as f:
        for number in range(offset):
            if not f.readline():
                return
            if number % BATCH == BATCH - 1:
                await asyncio.sleep(0)
        while left is None or left > 0:
            lines = _lines(f, 0, BATCH if left is None else min(BATCH, left))
            if not lines:
                return
            if left is not None:
                left -= len(lines)
            yield lines
            await asyncio.sleep(0)


async def jsonl(path: Path, offset: int, limit: int | None) -> AsyncIterator[bytes]:
    """The kept items as they are stored: JSON lines."""
    async for lines in _batches(path, offset, limit):
        yield b"".join(lines)


def _objects(lines: list[bytes]) -> list[dict[str, Any]]:
    found = []
    for line in lines:
        try:
            item = json.loads(line)
        except (ValueError, RecursionError):
            continue
        found.append(item if isinstance(item, dict) else {"value": item})
    return found


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, default=str)


async def csv_rows(path: Path, offset: int, limit: int | None) -> AsyncIterator[bytes]:
    """The kept items as CSV: one column per top-level key in the order first seen (a
    first pass finds them), nested values as JSON, a missing key an empty cell."""
    columns: dict[str, None] = {}
    async for lines in _batches(path, offset, limit):
        for item in _objects(lines):
            columns.update((key, None) for key in item if len(columns) < MAX_COLUMNS)
    names = list(columns)
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(names)
    yield out.getvalue().encode()
    async for lines in _batches(path, offset, limit):
        out.seek(0)
        out.truncate()
        for item in _objects(lines):
            writer.writerow([_cell(item.get(name)) for name in names])
        yield out.getvalue().encode()
