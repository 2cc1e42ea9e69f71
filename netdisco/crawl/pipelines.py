"""The pipelines an item stream feeds (step 5; the stream itself: ``crawl.itemstream``).

Every pipeline subscribes to the spider's item stream through its own chain of
reactive ``operators`` (filter, map, buffer_with_count, ...) and handles what comes
out in ``process``; ``DropItem`` ends an item's way through one pipeline. ``process``
may return an awaitable (the stream bounds how many are pending); a pipeline that
buffers writes its buffer out in ``flush``, which the acknowledgements wait for.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any

import reactivex
import structlog
from reactivex import Observable

from netdisco.crawl.items import item_dict

log = structlog.get_logger(__name__)
Operator = Callable[[Observable[Any]], Observable[Any]]


def to_jsonable(item: Any) -> Any:
    """An item as JSON-able values: pydantic models dumped in JSON mode, every other
    item (any mapping, dataclass, attrs class, ``Item``) as a dict of its fields
    (``netdisco.crawl.items``); anything else is left to ``json``."""
    dump = getattr(item, "model_dump", None)
    if callable(dump) and not isinstance(item, type):
        return dump(mode="json")
    return item_dict(item)


def json_line(item: Any) -> str:
    """One item as a UTF-8 JSON line (dataclasses as objects, the unknown as strings)."""
    return json.dumps(to_jsonable(item), ensure_ascii=False, default=str) + "\n"


class Pipeline:
    """Base class: override ``process`` (sync or async) and optionally ``operators``."""

    operators: Sequence[Operator] = ()

    def process(self, item: Any) -> Any:
        """Handle one item (or one batch, after a buffering operator)."""
        return None

    async def open(self) -> None:
        """Acquire resources (files, connections) before the first item."""

    async def flush(self) -> None:
        """Make what ``process`` received so far survive a crash of this process.

        Awaited before the requests that yielded those items are acknowledged; the
        crawler batches it (``flush_items``, ``flush_interval``), so it may be costly.
        """

    async def close(self) -> None:
        """Flush and release resources after the last item."""


class ConsolePipeline(Pipeline):
    """Prints each item as one JSON line on standard output."""

    def process(self, item: Any) -> None:
        sys.stdout.write(json_line(item))

    async def flush(self) -> None:
        sys.stdout.flush()


class JsonLinesPipeline(Pipeline):
    """Appends UTF-8 JSON lines to ``path``: one object per line (``overwrite``: truncate first).

    Appending is the default so that a resumed crawl keeps what earlier runs wrote.
    Each call's lines go to the operating system at once (they survive ``kill -9``, and
    the crawler acknowledges a page only after its items were processed); ``close`` also
    ``fsync``s (a power loss may lose lines written since). A buffering operator upstream
    makes ``process`` receive lists: each element is a line.
    """

    def __init__(
        self, path: str | Path, *, operators: Sequence[Operator] = (), overwrite: bool = False
    ) -> None:
        self.path = Path(path)
        self.operators = operators
        self.overwrite = overwrite
        self._file: IO[str] | None = None

    async def open(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = self.path.open("w" if self.overwrite else "a", encoding="utf-8")
        if self._file.tell() and not _ends_with_newline(self.path):
            # a line cut short by a crash: end it, so that the next line stays readable
            log.warning("output_line_incomplete", path=str(self.path))
            self._file.write("\n")

    def process(self, item: Any) -> None:
        assert self._file is not None, "JsonLinesPipeline.open() was not awaited"
        batch = item if isinstance(item, list) else (item,)
        self._file.write("".join(json_line(i) for i in batch))
        self._file.flush()

    async def close(self) -> None:
        if self._file is not None:
            await self.flush()
            os.fsync(self._file.fileno())
            self._file.close()
            self._file = None


def _ends_with_newline(path: Path) -> bool:
    with path.open("rb") as file:
        file.seek(-1, os.SEEK_END)
        return file.read(1) == b"\n"


class CallablePipeline(Pipeline):
    """Hands each item (or batch) to a user function, sync or async."""

    def __init__(self, func: Callable[[Any], Any], *, operators: Sequence[Operator] = ()) -> None:
        self.func = func
        self.operators = operators

    def process(self, item: Any) -> Any:
        return self.func(item)


__all__ = [
    "CallablePipeline",
    "ConsolePipeline",
    "JsonLinesPipeline",
    "Operator",
    "Pipeline",
    "json_line",
    "reactivex",
    "to_jsonable",
]
