"""A job's log file: written from the child's stderr, rotated by size, read in tails.

The engine is the only writer (:class:`LogWriter`), so rotation is a rename
between two writes: ``job.log`` becomes ``job.log.1`` (``.1`` becomes ``.2``; two
old files are kept with the job's history). Readers (:func:`tail`, :func:`follow`)
read whole lines only, a bounded number of bytes at a time, and reopen the file
when it was rotated under them.
"""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import BinaryIO

#: a longer line is cut there: one line never holds the reader's memory
MAX_LINE = 64 * 1024
#: how much ``follow`` reads at once
CHUNK = 256 * 1024
#: the most lines a tail returns
MAX_TAIL = 10_000
KEEP = 2


def job_dir(root: Path, job_id: str) -> Path:
    """One job's directory; ``job_id`` must be an id, so it never leaves ``root``."""
    if not re.fullmatch(r"[0-9a-f]{12}", job_id):
        raise ValueError(f"{job_id!r} is not a job id")
    return root / job_id


class LogWriter:
    """Appends lines to ``path``, rotating it past ``max_bytes``."""

    def __init__(self, path: Path, max_bytes: int) -> None:
        self.path = path
        self.max_bytes = max_bytes
        self._file = path.open("ab")
        self._size = self._file.tell()

    def write(self, line: bytes) -> None:
        """Write one line (cut at :data:`MAX_LINE`), then rotate when over the size."""
        if len(line) > MAX_LINE:
            line = line[: MAX_LINE - 1] + b"\n"
        elif not line.endswith(b"\n"):
            line += b"\n"
        self._file.write(line)
        self._size += len(line)
        if self._size >= self.max_bytes:
            self._rotate()

    def flush(self) -> None:
        """Make what was written visible to readers."""
        self._file.flush()

    def _rotate(self) -> None:
        self._file.close()
        for n in range(KEEP, 1, -1):
            older = self.path.with_name(f"{self.path.name}.{n - 1}")
            if older.exists():
                older.replace(self.path.with_name(f"{self.path.name}.{n}"))
        self.path.replace(self.path.with_name(f"{self.path.name}.1"))
        self._file = self.path.open("ab")
        self._size = 0

    def close(self) -> None:
        """Flush and close."""
        self._file.close()


def tail(path: Path, lines: int) -> tuple[bytes, int]:
    """The last ``lines`` whole lines of ``path`` and the offset after them."""
    lines = min(lines, MAX_TAIL)
    try:
        with path.open("rb") as f:
            end = f.seek(0, os.SEEK_END)
            start = max(0, end - min(end, (lines + 1) * MAX_LINE, 8 * 1024 * 1024))
            f.seek(start)
            data = f.read(end - start)
    except FileNotFoundError:
        return b"", 0
    cut = data.rfind(b"\n") + 1  # a line still being written waits for its end
    data, end = data[:cut], start + cut
    if lines == 0:
        return b"", end
    kept = data.splitlines(keepends=True)[-lines:]
    return b"".join(kept), end


async def follow(
    path: Path, offset: int, done: Callable[[], bool], poll: float = 0.1
) -> AsyncIterator[bytes]:
    """Whole lines appended to ``path`` after ``offset``, until ``done()`` and all is read.

    The open file is read to its end before a rotated one is opened from its start, so
    no line is lost or sent twice across a rotation."""
    f = _open(path, offset)
    try:
        while True:
            finished = done()  # asked before the read: lines written before it are sent
            chunk = _read(f)
            if chunk:
                yield chunk
                continue
            if f is None or _inode(path) != os.fstat(f.fileno()).st_ino:
                if f is not None:
                    f.close()
                f = _open(path, 0)  # rotated (or created): the new file from its start
                if f is not None and _read_ahead(f):
                    continue
            if finished:
                return
            await asyncio.sleep(poll)
    finally:
        if f is not None:
            f.close()


def _open(path: Path, offset: int) -> BinaryIO | None:
    try:
        f = path.open("rb")
    except FileNotFoundError:
        return None
    f.seek(offset)
    return f


def _read_ahead(f: BinaryIO) -> bool:
    """Whether ``f`` holds something past its position (without moving it)."""
    here = f.tell()
    more = bool(f.read(1))
    f.seek(here)
    return more


def _inode(path: Path) -> int | None:
    try:
        return path.stat().st_ino
    except FileNotFoundError:
        return None


def _read(f: BinaryIO | None) -> bytes:
    """Up to :data:`CHUNK` bytes of whole lines from ``f``'s position (a partial last line
    is left for the next read)."""
    if f is None:
        return b""
    here = f.tell()
    data = f.read(CHUNK)
    cut = data.rfind(b"\n") + 1
    f.seek(here + cut)
    return data[:cut]
