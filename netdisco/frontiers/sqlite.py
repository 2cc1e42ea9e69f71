"""A frontier that survives the process: one crawl's queue, seen set and counters in SQLite.

``state_dir = "DIR"`` picks it (``netdisco.frontiers.open_frontier``). ``DIR`` holds
``frontier.sqlite`` (WAL journal) and ``lock``. Run the same crawl again on the same
``state_dir`` and it carries on: every request queued and not acknowledged, including
those in flight when the process died, is queued again; the seen set keeps fetched
pages from being fetched again.

Speed: the queue is also kept in memory (a heap, like the memory frontier), so a take
costs no I/O; the seen set lives on disk, with a bounded cache of known fingerprints.
Acknowledgements are group-committed: every ``done`` waiting shares the next
transaction, so there is one commit per batch, not per page. ``synchronous=NORMAL``
in WAL mode: a commit writes to the WAL without ``fsync`` (microseconds), survives the
process being killed, and a power loss may roll back the last commits (those pages are
fetched again). So SQLite runs on the event loop's thread: measured, a worker thread
was slower, each statement waiting for the GIL to come back (``bench/state_bench.py``:
62 pages/s against the memory frontier's 72-428 on a loaded machine).

Guarantees: the acknowledgements of one batch are committed together right after it,
before any later one, so after ``kill -9`` only the requests taken and not yet committed
as done (in flight, or acknowledged in the last instant) are fetched again. A second
process on the same ``state_dir`` is refused (an ``flock`` on ``lock``). A ``state_dir``
that is a file, cannot be written, is full, or holds a database that is not ours (or an
older schema) raises ``StateDirError`` naming the path, and nothing in it is changed.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import heapq
import json
import os
import sqlite3
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any, Generic, TypeVar

import structlog

from netdisco.exceptions import RequestNotShareable, StateDirError
from netdisco.frontiers.base import Codec, R

log = structlog.get_logger(__name__)
T = TypeVar("T")

#: fingerprints remembered in memory as seen (a bounded cache: the memory frontier keeps
#: them all), so that links a page shares with others cost no encoding, no round trip
KNOWN_MAX = 200_000
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

    def commit(self, done: Sequence[int], meta: dict[str, str]) -> None:
        """Delete the acknowledged rows, save ``meta``, commit everything since the last one."""
        try:
            db = self._begin()
            db.executemany("DELETE FROM queue WHERE id = ?", [(i,) for i in done])
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


class SqliteFrontier(Generic[R]):
    """The ``Frontier`` protocol over SQLite in ``directory`` (see the module docstring)."""

    def __init__(self, directory: str | Path, name: str, codec: Codec[R]) -> None:
        self.directory = Path(directory)
        self.codec = codec
        self._store = Store(self.directory, name)
        self._opened = False
        self._heap: list[tuple[int, int, R]] = []
        self._leased: dict[int, tuple[int, R]] = {}  # id(request) -> (row id, request)
        self._seen = 0
        self._meta: dict[str, str] = {}
        self._dirty: dict[str, str] = {}  # meta to write with the next commit
        self._acked: list[int] = []  # row ids acknowledged, not yet committed
        self._next: asyncio.Future[None] | None = None  # the commit the waiting share
        self._committer: asyncio.Task[None] | None = None
        self._failure: StateDirError | None = None
        self._known: set[bytes] = set()  # fingerprints certainly in the seen table
        self._unreadable = 0  # stored requests this spider could not decode

    async def _run(self, work: Callable[..., T], *args: Any) -> T:
        if self._failure is not None:
            raise self._failure
        if not self._opened:
            raise StateDirError(self.directory, "the frontier is not open")
        try:
            return work(*args)
        except StateDirError as exc:
            self._failure = exc
            log.error("state_dir_failed", error=str(exc))
            raise

    # -- lifecycle -----------------------------------------------------------------

    async def open(self) -> None:
        """Lock the directory and load the queue; ``StateDirError`` if it cannot be used."""
        if self._opened:
            return
        self._opened = True
        try:
            rows, self._seen, self._meta = await self._run(self._store.open)
        except BaseException:
            self._opened = False
            raise
        for rowid, priority, body in rows:
            try:
                request = self.codec.decode(body)
            except (RequestNotShareable, ValueError, KeyError, TypeError) as exc:
                # kept in the database for a spider that can read it (a renamed callback)
                log.error("state_request_unreadable", id=rowid, error=repr(exc))
                self._unreadable += 1
                continue
            self._heap.append((-priority, rowid, request))
        heapq.heapify(self._heap)
        log.info("state_opened", state_dir=str(self.directory), queued=len(rows), seen=self._seen)
        if self.finished:  # the crawler ends at once: say why, and how to crawl again
            log.warning(
                "crawl_already_finished",
                state_dir=str(self.directory),
                to_crawl_again="delete the state_dir or use another one",
            )

    async def close(self) -> None:
        """Commit what is left, close the database, release the lock."""
        if not self._opened:
            return
        try:
            if self._failure is None:
                await self._commit()
        finally:
            self._opened = False
            self._store.close()
            log.info("state_closed", state_dir=str(self.directory), queued=len(self._heap))

    # -- the Frontier protocol ---------------------------------------------------------

    async def add(self, requests: Sequence[R]) -> list[bool]:
        rows: list[Row] = []
        kept: list[int] = []
        for index, request in enumerate(requests):
            if request.fingerprint in self._known and not request.dont_filter:
                continue
            try:
                body = self.codec.encode(request)
            except RequestNotShareable as exc:
                log.error("request_not_storable", url=request.url, error=str(exc))
                continue
            rows.append((request.fingerprint, request.dont_filter, request.priority, body))
            kept.append(index)
        added = [False] * len(requests)
        if not rows:
            return added
        ids, new_count = await self._run(self._store.insert, rows)
        self._seen += new_count
        if len(self._known) > KNOWN_MAX:
            self._known.clear()
        self._known.update(row[0] for row in rows)
        for index, rowid in zip(kept, ids, strict=True):
            if rowid is not None:
                request = requests[index]
                heapq.heappush(self._heap, (-request.priority, rowid, request))
                added[index] = True
        return added

    async def take(self) -> R | None:
        if self._failure is not None:
            raise self._failure
        if not self._heap:
            return None
        _, rowid, request = heapq.heappop(self._heap)
        self._leased[id(request)] = (rowid, request)
        return request

    async def done(self, request: R, *, requeue: bool = False) -> None:
        """A requeue stays in memory (its row was never deleted); an ack is committed with
        the others of its batch right after (``close`` waits for the last commit)."""
        entry = self._leased.pop(id(request), None)
        if entry is None:
            return
        rowid, _ = entry
        if requeue:
            heapq.heappush(self._heap, (-request.priority, rowid, request))
            return
        self._acked.append(rowid)
        self._commit_soon()

    async def counts(self) -> tuple[int, int, int]:
        if self._failure is not None:
            raise self._failure
        return len(self._heap), len(self._leased), self._seen

    # -- Persistent ------------------------------------------------------------------

    @property
    def finished(self) -> bool:
        return self._meta.get("finished") == "1"

    def stored_stats(self) -> dict[str, int]:
        stats = json.loads(self._meta.get("stats", "{}"))
        return {str(k): int(v) for k, v in stats.items()} if isinstance(stats, dict) else {}

    def store_stats(self, stats: dict[str, int]) -> None:
        self._dirty["stats"] = json.dumps(stats, sort_keys=True)

    async def mark_finished(self) -> None:
        if self._unreadable:  # not finished while requests it could not read wait
            log.error("state_not_finished", unreadable=self._unreadable)
            await self._commit()
            return
        self._dirty["finished"] = "1"
        await self._commit()
        self._meta["finished"] = "1"

    # -- group commit ------------------------------------------------------------------

    def _commit_soon(self) -> asyncio.Future[None]:
        """The next commit; everything acknowledged before it runs shares it."""
        if self._next is None:
            self._next = asyncio.get_running_loop().create_future()
        if self._committer is None or self._committer.done():
            self._committer = asyncio.create_task(self._commit_loop(), name="state-commit")
        return self._next

    async def _commit(self) -> None:
        """Wait for the next commit."""
        await asyncio.shield(self._commit_soon())

    async def _commit_loop(self) -> None:
        """One commit at a time; those who asked during one share the one after."""
        while self._next is not None:
            waiting, self._next = self._next, None
            acked, self._acked = self._acked, []
            meta, self._dirty = self._dirty, {}
            try:
                await self._run(self._store.commit, acked, meta)
            except Exception as exc:
                waiting.set_exception(exc)
                waiting.exception()  # read here too: a waiter may have been cancelled
            else:
                waiting.set_result(None)
