"""Where the memory frontier's queue goes beyond its head: a temporary SQLite database.

SQLite opens a database named ``""`` as a private temporary file (in ``SQLITE_TMPDIR``
or ``TMPDIR``, else ``/tmp``) and unlinks it at once: nothing is left on disk when the
database is closed, nor after the process was killed (``kill -9``, an out-of-memory
kill), and no other process can open it. Nothing here needs to survive the process, so
there is no journal and no ``fsync``; SQLite's page cache is kept small (``CACHE_KIB``).
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Sequence

from netdisco.frontiers.head import Key

#: SQLite's page cache for the spilled queue, KiB
CACHE_KIB = 4096
_SCHEMA = (
    "CREATE TABLE queue (neg INTEGER, id INTEGER, body TEXT NOT NULL, PRIMARY KEY (neg, id))"
    " WITHOUT ROWID"
)


class Spill:
    """The spilled requests (encoded), in take order: ``(-priority, order)``."""

    def __init__(self) -> None:
        db = sqlite3.connect("", isolation_level=None, check_same_thread=False)
        for pragma in ("journal_mode=OFF", "synchronous=OFF", f"cache_size=-{CACHE_KIB}"):
            db.execute(f"PRAGMA {pragma}")
        db.execute(_SCHEMA)
        self._db: sqlite3.Connection | None = db
        self.count = 0

    def write(self, rows: Sequence[tuple[Key, str]]) -> None:
        """Spill ``rows`` (key, encoded request), in one transaction."""
        db = self._connection()
        db.execute("BEGIN")
        db.executemany("INSERT INTO queue VALUES (?, ?, ?)", ((k[0], k[1], b) for k, b in rows))
        db.execute("COMMIT")
        self.count += len(rows)

    def read(self, limit: int) -> list[tuple[Key, str]]:
        """Take back the first ``limit`` rows (fewer when fewer are spilled)."""
        db = self._connection()
        rows = db.execute("SELECT neg, id, body FROM queue ORDER BY neg, id LIMIT ?", (limit,))
        taken = [((neg, order), body) for neg, order, body in rows.fetchall()]
        if taken:
            db.execute("DELETE FROM queue WHERE (neg, id) <= (?, ?)", taken[-1][0])
            self.count -= len(taken)
        return taken

    def _connection(self) -> sqlite3.Connection:
        assert self._db is not None, "the spill was closed"
        return self._db

    def close(self) -> None:
        """Close the database: SQLite removes nothing more, the file was unlinked at open."""
        if self._db is not None:
            with contextlib.suppress(sqlite3.Error):
                self._db.close()
            self._db = None
            self.count = 0
