"""How a feed writes items: JSON lines, one JSON array, CSV rows, SQLite rows.

Non-scalar values (lists, dicts) become JSON text in CSV cells and SQLite columns,
so no value is lost. Items that are not mappings (after dataclasses become dicts)
are written as ``{"value": item}``.
"""

from __future__ import annotations

import csv
import json
import os
import sqlite3
from collections.abc import Mapping, Sequence
from typing import IO, Any, Protocol

from netdisco.crawl.pipelines import json_line, to_jsonable

SCALARS = (str, int, float, bool, type(None))


class Writer(Protocol):
    """One feed's format on its sink."""

    def write(self, item: Any) -> None:
        """Add one item."""

    def flush(self, *, sync: bool = True) -> None:
        """Hand what was written to the operating system; with ``sync``, to the disk too."""

    def close(self) -> None:
        """Finish the format (a JSON array's bracket), flush and close."""


def record(item: Any) -> Mapping[str, Any]:
    """An item as a mapping of field -> value."""
    value = to_jsonable(item)
    return value if isinstance(value, Mapping) else {"value": value}


def cell(value: Any) -> Any:
    """A value for a CSV cell or a SQLite column: scalars as they are, the rest as JSON."""
    if isinstance(value, SCALARS):
        return value
    return json.dumps(to_jsonable(value), ensure_ascii=False, default=str)


class TextWriter:
    """JSON lines on a text stream; the base of the other text formats."""

    def __init__(self, stream: IO[str], *, owned: bool) -> None:
        self.stream = stream
        self.owned = owned  # a file we opened (closed and fsync'ed), not standard output

    def write(self, item: Any) -> None:
        self.stream.write(json_line(item))

    def flush(self, *, sync: bool = True) -> None:
        self.stream.flush()
        if sync and self.owned:
            os.fsync(self.stream.fileno())

    def finish(self) -> None:
        """Write whatever the format needs after the last item."""

    def close(self) -> None:
        self.finish()
        self.flush()
        if self.owned:
            self.stream.close()


class JsonWriter(TextWriter):
    """One JSON array, an item per line."""

    def __init__(self, stream: IO[str], *, owned: bool) -> None:
        super().__init__(stream, owned=owned)
        self._first = True
        stream.write("[")

    def write(self, item: Any) -> None:
        self.stream.write(("\n" if self._first else ",\n") + json_line(item).rstrip("\n"))
        self._first = False

    def finish(self) -> None:
        self.stream.write("\n]\n")


class CsvWriter(TextWriter):
    """CSV with a header row; columns declared, read from the file appended to, or the
    first item's keys. Keys outside the columns are left out (declare them to keep them)."""

    def __init__(
        self, stream: IO[str], *, owned: bool, fields: Sequence[str], header: bool
    ) -> None:
        super().__init__(stream, owned=owned)
        self.fields = list(fields)
        self._header = header
        self._csv: csv.DictWriter[str] | None = None

    def write(self, item: Any) -> None:
        row = record(item)
        if self._csv is None:
            self.fields = self.fields or list(row)
            self._csv = csv.DictWriter(self.stream, self.fields, extrasaction="ignore")
            if self._header:
                self._csv.writeheader()
        self._csv.writerow({name: cell(row.get(name)) for name in self.fields})


def existing_header(path: str) -> list[str]:
    """The header row of a CSV file being appended to (empty if the file is)."""
    with open(path, encoding="utf-8", newline="") as handle:
        return next(csv.reader(handle), [])


def quote(name: str) -> str:
    """A SQLite identifier, quoted."""
    return '"' + name.replace('"', '""') + '"'


class SqliteWriter:
    """Rows of a table named after the spider; columns declared or from the items (a key
    first seen later adds a column). Each flush commits (WAL: a commit survives a crash
    of the process; ``sync`` makes it survive one of the machine)."""

    def __init__(self, path: str, table: str, *, fields: Sequence[str], overwrite: bool) -> None:
        self.db = sqlite3.connect(path)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")
        self.table = quote(table)
        self.declared = list(fields)
        if overwrite:
            self.db.execute(f"DROP TABLE IF EXISTS {self.table}")
        self.columns = [row[1] for row in self.db.execute(f"PRAGMA table_info({self.table})")]

    def write(self, item: Any) -> None:
        row = record(item)
        names = self.declared or list(row)
        self._ensure(names)
        sql = f"INSERT INTO {self.table} ({', '.join(map(quote, names))}) VALUES "
        self.db.execute(sql + f"({', '.join('?' * len(names))})", [cell(row.get(n)) for n in names])

    def _ensure(self, names: Sequence[str]) -> None:
        missing = [n for n in names if n not in self.columns]
        if not missing:
            return
        if not self.columns:
            self.db.execute(f"CREATE TABLE {self.table} ({', '.join(map(quote, missing))})")
        else:
            for name in missing:
                self.db.execute(f"ALTER TABLE {self.table} ADD COLUMN {quote(name)}")
        self.columns += missing

    def flush(self, *, sync: bool = True) -> None:
        self.db.commit()
        if sync:
            self.db.execute("PRAGMA wal_checkpoint(FULL)")

    def close(self) -> None:
        self.flush()
        self.db.close()
