"""The blocking half of the ``state_dir`` frontier: the lock, the database, its transactions.

``netdisco.frontiers.sqlite`` explains the guarantees; this module holds the SQL. The
``pages`` table (the page store of re-crawls, ``netdisco.frontiers.base.PageStore``) was
added to schema version 1 without a version change: an older state gains the empty
table when opened, and an older netdisco ignores it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import IO

from netdisco.exceptions import StateDirError

DB_NAME = "frontier.sqlite"
LOCK_NAME = "lock"
#: bumped whenever the tables change; an older state is refused with a clear message
SCHEMA_VERSION = 1
_SCHEMA = """
CREATE TABLE netdisco_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE seen (fp BLOB PRIMARY KEY) WITHOUT ROWID;
CREATE TABLE queue (id INTEGER PRIMARY KEY, priority INTEGER NOT NULL, body TEXT NOT NULL);
"""
_INSERT_SEEN = "INSERT OR IGNORE INTO seen (fp) VALUES (?)"
_INSERT_QUEUE = "INSERT INTO queue (priority, body) VALUES (?, ?)"
_SET_META = "INSERT OR REPLACE INTO netdisco_meta (key, value) VALUES (?, ?)"
#: the page store of re-crawls: per fingerprint, a record the crawl wrote (opaque here)
_PAGES = "CREATE TABLE IF NOT EXISTS pages (fp BLOB PRIMARY KEY, record BLOB NOT NULL)"
_PUT_PAGE = "INSERT OR REPLACE INTO pages (fp, record) VALUES (?, ?)"
#: the failed store (``netdisco.frontiers.failed``), added like ``pages``: per request
#: fingerprint (hex), its order (oldest first), reason, record (JSON) and the request
_FAILED = (
    "CREATE TABLE IF NOT EXISTS failed (id TEXT PRIMARY KEY, seq INTEGER NOT NULL,"
    " reason TEXT NOT NULL, record TEXT NOT NULL, body TEXT NOT NULL)"
)
_KEEP_FAILED = (
    "INSERT OR REPLACE INTO failed (id, seq, reason, record, body)"
    " VALUES (?, (SELECT coalesce(max(seq), 0) + 1 FROM failed), ?, ?, ?)"
)
_DROP_FAILED = "DELETE FROM failed WHERE id IN (SELECT id FROM failed ORDER BY seq LIMIT ?)"
#: a failed row to keep: (id, reason, record JSON, request body)
FailedRow = tuple[str, str, str, str]
#: a new row: (fingerprint, dont_filter, priority, body)
Row = tuple[bytes, bool, int, str]


class Store:
    """The blocking half: the lock, the database and its transactions."""

    def __init__(self, directory: Path, name: str) -> None:
        self.directory = directory
        self.name = name
        self.path = directory / DB_NAME
        self._lock: IO[str] | None = None
        self._db: sqlite3.Connection | None = None

    def open(self) -> tuple[list[tuple[int, int, str]], int, dict[str, str]]:
        """Lock, check, prepare; the queued rows (id, priority, body), seen count, meta."""
        self._take_lock()
        try:
            return self._open_db()
        except BaseException:
            self.close()
            raise

    def _take_lock(self) -> None:
        if self.directory.exists() and not self.directory.is_dir():
            raise StateDirError(self.directory, "is not a directory")
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            lock = (self.directory / LOCK_NAME).open("a+", encoding="utf-8")
        except OSError as exc:
            raise StateDirError(self.directory, f"cannot be written: {exc.strerror}") from exc
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.seek(0)
            holder = lock.read().strip() or "?"
            lock.close()
            raise StateDirError(
                self.directory,
                f"in use by another netdisco process (pid {holder}); "
                "one state_dir serves one crawl process at a time",
            ) from None
        self._lock = lock
        with contextlib.suppress(OSError):  # the pid is for the message above only
            lock.truncate(0)
            lock.write(f"{os.getpid()}\n")
            lock.flush()

    def _open_db(self) -> tuple[list[tuple[int, int, str]], int, dict[str, str]]:
        try:
            db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
            self._db = db
            tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master")}
            if not tables:
                self._create(db)
                tables = {"netdisco_meta", "seen", "queue"}
            meta = {}
            if "netdisco_meta" in tables:
                meta = dict(db.execute("SELECT key, value FROM netdisco_meta").fetchall())
        except sqlite3.Error as exc:
            raise StateDirError(
                self.path, f"is not a readable netdisco crawl state ({exc}); it was left as it is"
            ) from exc
        self._check(tables, meta)
        try:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            db.execute(_PAGES)  # absent from states written before re-crawls: added, empty
            db.execute(_FAILED)  # the same for the failed store
            rows = db.execute("SELECT id, priority, body FROM queue ORDER BY id").fetchall()
            seen = int(db.execute("SELECT count(*) FROM seen").fetchone()[0])
        except sqlite3.Error as exc:
            raise self._failed(exc) from exc
        return rows, seen, meta

    def _create(self, db: sqlite3.Connection) -> None:
        db.executescript("BEGIN;\n" + _SCHEMA)  # committed below, with the meta rows
        db.execute(_SET_META, ("schema_version", str(SCHEMA_VERSION)))
        db.execute(_SET_META, ("spider", self.name))
        db.execute("COMMIT")

    def _check(self, tables: set[str], meta: dict[str, str]) -> None:
        """Refuse a database that is not ours, of another schema or of another spider."""
        if not {"netdisco_meta", "seen", "queue"} <= tables:
            found = ", ".join(sorted(tables))
            raise StateDirError(
                self.path, f"holds a database that is not a netdisco crawl state (tables: {found})"
            )
        version = meta.get("schema_version", "?")
        if version != str(SCHEMA_VERSION):
            raise StateDirError(
                self.path,
                f"was written with state schema version {version}; this netdisco reads "
                f"version {SCHEMA_VERSION} only: finish that crawl with the netdisco that "
                "started it, or use another state_dir",
            )
        if meta.get("spider") != self.name:
            raise StateDirError(
                self.path, f"holds the crawl of spider {meta.get('spider')!r}, not {self.name!r}"
            )

    def _failed(self, exc: sqlite3.Error) -> StateDirError:
        return StateDirError(self.path, f"cannot keep the crawl state: {exc}")

    def _begin(self) -> sqlite3.Connection:
        assert self._db is not None, "Store.open() was not called"
        if not self._db.in_transaction:
            self._db.execute("BEGIN")
        return self._db

    def insert(self, rows: Sequence[Row]) -> tuple[list[int | None], int]:
        """For each row the id it was queued under (None: seen before); how many were new."""
        try:
            db = self._begin()
            ids: list[int | None] = []
            new_count = 0
            for fingerprint, dont_filter, priority, body in rows:
                new = db.execute(_INSERT_SEEN, (fingerprint,)).rowcount == 1
                new_count += new
                if new or dont_filter:
                    ids.append(db.execute(_INSERT_QUEUE, (priority, body)).lastrowid)
                else:
                    ids.append(None)
            return ids, new_count
        except sqlite3.Error as exc:
            raise self._failed(exc) from exc

    def claim(self, fingerprints: Sequence[bytes]) -> list[bytes]:
        """Mark ``fingerprints`` seen (in the open transaction); those that were new."""
        try:
            db = self._begin()
            return [fp for fp in fingerprints if db.execute(_INSERT_SEEN, (fp,)).rowcount == 1]
        except sqlite3.Error as exc:
            raise self._failed(exc) from exc

    def commit(self, done: Sequence[int], meta: dict[str, str]) -> None:
        """Delete the acknowledged rows, save ``meta``, commit everything since the last one."""
        try:
            db = self._begin()
            db.executemany("DELETE FROM queue WHERE id = ?", [(i,) for i in done])
            db.executemany(_SET_META, meta.items())
            db.execute("COMMIT")
        except sqlite3.Error as exc:
            raise self._failed(exc) from exc

    def get_page(self, fingerprint: bytes) -> bytes | None:
        """The page record stored for ``fingerprint`` (uncommitted ones included)."""
        assert self._db is not None, "Store.open() was not called"
        try:  # a read opens no transaction of its own; it sees ours, if one is open
            query = self._db.execute("SELECT record FROM pages WHERE fp = ?", (fingerprint,))
            row = query.fetchone()
        except sqlite3.Error as exc:
            raise self._failed(exc) from exc
        return None if row is None else bytes(row[0])

    def put_page(self, fingerprint: bytes, record: bytes) -> None:
        """Store a page record; committed with the next commit (before its page's ack)."""
        try:
            self._begin().execute(_PUT_PAGE, (fingerprint, record))
        except sqlite3.Error as exc:
            raise self._failed(exc) from exc

    def keep_failed(self, row: FailedRow, keep: int) -> int:
        """Keep a failed request (replacing its older failure), drop the oldest beyond
        ``keep`` and count them in the meta ``failed_dropped``; how many are kept."""
        try:
            db = self._begin()
            db.execute(_KEEP_FAILED, row)
            count = int(db.execute("SELECT count(*) FROM failed").fetchone()[0])
            extra = count - max(keep, 0)
            if extra > 0:
                db.execute(_DROP_FAILED, (extra,))
                dropped = self.failed_dropped() + extra
                db.execute(_SET_META, ("failed_dropped", str(dropped)))
                count -= extra
            return count
        except sqlite3.Error as exc:
            raise self._failed(exc) from exc

    def failed_dropped(self) -> int:
        """How many failed records were dropped to stay within ``keep``."""
        assert self._db is not None, "Store.open() was not called"
        row = self._db.execute("SELECT value FROM netdisco_meta WHERE key = 'failed_dropped'")
        found = row.fetchone()
        return int(found[0]) if found is not None and str(found[0]).isdigit() else 0

    def failed_records(self) -> list[tuple[str, str]]:
        """Every kept failure as (record JSON, request body), oldest first."""
        assert self._db is not None, "Store.open() was not called"
        try:
            rows = self._db.execute("SELECT record, body FROM failed ORDER BY seq").fetchall()
        except sqlite3.Error as exc:
            raise self._failed(exc) from exc
        return [(str(record), str(body)) for record, body in rows]

    def forget_failed(self, ids: Sequence[str]) -> None:
        """Delete the failed records ``ids`` (in the open transaction)."""
        try:
            self._begin().executemany("DELETE FROM failed WHERE id = ?", [(i,) for i in ids])
        except sqlite3.Error as exc:
            raise self._failed(exc) from exc

    def new_run(self, meta: dict[str, str]) -> None:
        """Empty the seen set, save ``meta`` (the run's id, its cleared counters), commit."""
        try:
            db = self._begin()
            db.execute("DELETE FROM seen")
            db.executemany(_SET_META, meta.items())
            db.execute("COMMIT")
        except sqlite3.Error as exc:
            raise self._failed(exc) from exc

    def close(self) -> None:
        """Close the database (uncommitted work is rolled back) and release the lock."""
        if self._db is not None:
            with contextlib.suppress(sqlite3.Error):
                self._db.close()
            self._db = None
        if self._lock is not None:
            self._lock.close()  # closing the file releases the flock
            self._lock = None
