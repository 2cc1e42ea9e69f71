"""A frontier that survives the process: one crawl's queue, seen set and counters in SQLite.

``state_dir = "DIR"`` picks it (``netdisco.frontiers.open_frontier``). ``DIR`` holds
``frontier.sqlite`` (WAL journal) and ``lock``. Run the same crawl again on the same
``state_dir`` and it carries on: every request queued and not acknowledged, including
those in flight when the process died, is queued again; the seen set keeps fetched
pages from being fetched again. It is also the crawl's page store (``PageStore``, for
re-crawls): a finished crawl may begin a new run, which empties the seen set of the
last one and keeps the pages (``begin_run``).

Memory: the queue lives on disk (the ``queue`` table, with an index in take order);
a bounded head of it is in memory (``netdisco.frontiers.head``: at most ``HEAD_LIMIT``
requests, refilled ``HEAD_LIMIT // 2`` rows at a time), so memory stays flat however
long the queue grows. The seen set lives on disk too, with a bounded cache of known
fingerprints. The head is one queue for every host: the crawl sets aside the requests
of a host that is not due (``crawl.hosts``).

Speed: a queue that fits in the head costs no read at all (a request added is kept in
memory as it is, and taken from there); a longer one costs one indexed read per
``HEAD_LIMIT // 2`` takes, and decoding each request read. Adds share one open
transaction until the next commit. Acknowledgements are group-committed: every ``done``
waiting shares the next transaction, so there is one commit per batch, not per page.
``synchronous=NORMAL`` in WAL mode: a commit writes to the WAL without ``fsync``
(microseconds), survives the process being killed, and a power loss may roll back the
last commits (those pages are fetched again). So SQLite runs on the event loop's
thread: measured, a worker thread was slower, each statement waiting for the GIL to
come back (``bench/state_bench.py``).

Guarantees: the acknowledgements of one batch are committed together right after it,
before any later one, so after ``kill -9`` only the requests taken and not yet committed
as done (in flight, or acknowledged in the last instant) are fetched again. A second
process on the same ``state_dir`` is refused (an ``flock`` on ``lock``). A ``state_dir``
that is a file, cannot be written, is full, or holds a database that is not ours (or an
older schema) raises ``StateDirError`` naming the path, and nothing in it is changed.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import structlog

from netdisco.exceptions import RequestNotShareable, StateDirError
from netdisco.frontiers.base import Codec, Frontier, PageStore, Queued, R, start_over_state_dir
from netdisco.frontiers.failed import (
    FailedPage,
    FailedRecord,
    decode_records,
    decoded,
    encoded,
    page_of,
    selected,
)
from netdisco.frontiers.head import FIRST, Head, Key
from netdisco.frontiers.sqlite_store import DB_NAME, LOCK_NAME, SCHEMA_VERSION, Row, Store

__all__ = ["DB_NAME", "LOCK_NAME", "SCHEMA_VERSION", "SqliteFrontier", "Store"]

log = structlog.get_logger(__name__)
T = TypeVar("T")

#: fingerprints remembered in memory as seen (a bounded cache: the memory frontier keeps
#: them all), so that links a page shares with others cost no encoding, no round trip
KNOWN_MAX = 200_000
#: requests of the queue kept in memory (about 600 bytes each), the rest on disk
HEAD_LIMIT = 4096


class SqliteFrontier(Frontier[R]):
    """A ``Frontier`` over SQLite in ``directory`` (see the module docstring): it resumes
    and is its own page store."""

    def __init__(
        self, directory: str | Path, name: str, codec: Codec[R], *, head_limit: int = HEAD_LIMIT
    ) -> None:
        self.directory = Path(directory)
        self.codec = codec
        self._store = Store(self.directory, name)
        self._opened = False
        self._head: Head[R] = Head(head_limit, bound=FIRST)  # a cache of the queue table
        self._queued = 0  # rows waiting: in the head or beyond it on disk
        self._leased: dict[int, tuple[Key, R]] = {}  # id(request) -> (key, request)
        self._seen = 0
        self._meta: dict[str, str] = {}
        self._dirty: dict[str, str] = {}  # meta to write with the next commit
        self._acked: list[int] = []  # row ids acknowledged, not yet committed
        self._next: asyncio.Future[None] | None = None  # the commit the waiting share
        self._committer: asyncio.Task[None] | None = None
        self._failure: StateDirError | None = None
        self._known: set[bytes] = set()  # fingerprints certainly in the seen table
        self._unreadable: set[int] = set()  # row ids this spider could not decode

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
        """Lock the directory, read the queue's first rows; ``StateDirError`` if it cannot."""
        if self._opened:
            return
        self._opened = True
        try:
            self._queued, self._seen, self._meta = await self._run(self._store.open)
            await self._run(self._refill)  # the first rows: unreadable ones are told now
        except BaseException:
            self._opened = False
            self._store.close()
            raise
        log.info(
            "state_opened", state_dir=str(self.directory), queued=self._queued, seen=self._seen
        )
        if self.finished:  # the crawler ends at once: say why, and how to crawl again
            log.warning(
                "crawl_already_finished",
                state_dir=str(self.directory),
                to_crawl_again=self.start_over(),
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
            log.info("state_closed", state_dir=str(self.directory), queued=self._queued)

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
                self._queue(requests[index], rowid)
                added[index] = True
        return added

    def _queue(self, request: R, rowid: int) -> None:
        """A row now waiting: kept in memory if the head reaches it, else read later."""
        self._queued += 1
        key = (-request.priority, rowid)
        if self._head.holds(key):
            self._head.push(key, request)
            if self._head.over():
                self._head.trim()  # the rows trimmed stay on disk, read again in turn

    def _refill(self) -> None:
        """Read the next rows beyond the head, skipping those taken (not yet deleted) and
        those this spider cannot read, until the head has one or the queue is read."""
        batch = max(1, self._head.limit // 2)
        while self._head.stale():
            after = None if self._head.bound == FIRST else self._head.bound
            rows = self._store.load(after, batch)
            out = self._unreadable.union(key[1] for key, _ in self._leased.values())
            out.update(self._acked)
            entries = []
            for rowid, priority, body in rows:
                if rowid not in out and (request := self._decode(rowid, body)) is not None:
                    entries.append(((-priority, rowid), request))
            last = (-rows[-1][1], rows[-1][0]) if len(rows) == batch else None
            self._head.refill(entries, last)

    def _decode(self, rowid: int, body: str) -> R | None:
        try:
            return self.codec.decode(body)
        except (RequestNotShareable, ValueError, KeyError, TypeError) as exc:
            # kept in the database for a spider that can read it (a renamed callback)
            log.error("state_request_unreadable", id=rowid, error=repr(exc))
            self._unreadable.add(rowid)
            self._queued -= 1
            return None

    async def claim(self, requests: Sequence[Queued]) -> list[bool]:
        """Mark fingerprints seen without queueing them (committed with the next batch)."""
        fresh = [r.fingerprint for r in requests if r.fingerprint not in self._known]
        new = set(await self._run(self._store.claim, fresh)) if fresh else set()
        self._seen += len(new)
        if len(self._known) > KNOWN_MAX:
            self._known.clear()
        self._known.update(r.fingerprint for r in requests)
        claimed = []
        for request in requests:  # a fingerprint asked twice is new the first time only
            claimed.append(request.fingerprint in new)
            new.discard(request.fingerprint)
        return claimed

    async def take(self) -> R | None:
        if self._failure is not None:
            raise self._failure
        if self._head.stale():
            await self._run(self._refill)
        entry = self._head.pop()
        if entry is None:
            return None
        key, request = entry
        self._queued -= 1
        self._leased[id(request)] = (key, request)
        return request

    async def done(self, request: R, *, requeue: bool = False) -> None:
        """A requeue stays in memory (its row was never deleted); an ack is committed with
        the others of its batch right after (``close`` waits for the last commit)."""
        entry = self._leased.pop(id(request), None)
        if entry is None:
            return
        key, _ = entry
        if requeue:  # in memory again if the head reaches it, else read again in turn
            self._queued += 1
            if self._head.holds(key):
                self._head.push(key, request)
            return
        self._acked.append(key[1])
        self._commit_soon()

    async def counts(self) -> tuple[int, int, int]:
        if self._failure is not None:
            raise self._failure
        return self._queued, len(self._leased), self._seen

    # -- resume ------------------------------------------------------------------------

    @property
    def finished(self) -> bool:
        return self._meta.get("finished") == "1"

    def start_over(self) -> str:
        return start_over_state_dir(self.directory)

    def stored_stats(self) -> dict[str, int]:
        stats = json.loads(self._meta.get("stats", "{}"))
        return {str(k): int(v) for k, v in stats.items()} if isinstance(stats, dict) else {}

    def store_stats(self, stats: dict[str, int]) -> None:
        self._dirty["stats"] = json.dumps(stats, sort_keys=True)

    async def mark_finished(self) -> None:
        if self._unreadable:  # not finished while requests it could not read wait
            log.error("state_not_finished", unreadable=len(self._unreadable))
            await self._commit()
            return
        self._dirty["finished"] = "1"
        await self._commit()
        self._meta["finished"] = "1"

    async def ran_to_end(self) -> bool:
        return self.finished

    # -- page store --------------------------------------------------------------------

    def pages(self) -> PageStore:
        return self

    async def get_page(self, fingerprint: bytes) -> bytes | None:
        return await self._run(self._store.get_page, fingerprint)

    async def put_page(self, fingerprint: bytes, record: bytes) -> None:
        await self._run(self._store.put_page, fingerprint, record)

    async def begin_run(self, run: str) -> bool:
        """A finished crawl starts run ``run``: seen set emptied, counters cleared, pages
        kept. A crawl that did not finish (stopped, killed) resumes instead: False."""
        if not self.finished or self._meta.get("run") == run:
            return False
        generation = str(int(self._meta.get("generation", "0")) + 1)
        meta = {"finished": "0", "stats": "{}", "run": run, "generation": generation}
        await self._commit()
        await self._run(self._store.new_run, meta)
        self._meta.update(meta)
        self._seen = 0
        self._known.clear()
        log.info("state_new_run", run=run, generation=generation)
        return True

    # -- failed store ------------------------------------------------------------------

    async def keep_failed(self, request: R, record: FailedRecord, keep: int) -> int:
        """Kept in the database, committed with the next batch."""
        row = (record.id, record.reason, record.bounded().to_json(), encoded(self.codec, request))
        return await self._on_store(self._store.keep_failed, row, keep)

    async def failed(self, reason: str | None, offset: int, limit: int) -> FailedPage:
        rows = await self._on_store(self._store.failed_records)
        dropped = await self._on_store(self._store.failed_dropped)
        return page_of(decode_records([r for r, _ in rows]), reason, offset, limit, dropped)

    async def take_failed(
        self, reason: str | None = None, ids: Sequence[str] | None = None
    ) -> list[R]:
        return decoded(self.codec, await self._on_store(self._take_failed, reason, ids))

    def _take_failed(self, reason: str | None, ids: Sequence[str] | None) -> list[str]:
        chosen = []
        for raw, body in self._store.failed_records():
            found = decode_records([raw])
            if found and selected(found[0], reason, ids):
                chosen.append((found[0].id, body))
        self._store.forget_failed([key for key, _ in chosen])
        return [body for _, body in chosen if body]

    async def _on_store(self, work: Callable[..., T], *args: Any) -> T:
        """``work`` on the open database (committed with the next batch); after the crawl
        closed it, on the database opened for this call only (refused while another
        process holds the ``state_dir``)."""
        if self._opened:
            result = await self._run(work, *args)
            if work != self._store.keep_failed:  # a failure joins the next batch's commit
                self._commit_soon()
            return result
        self._store.open()
        try:
            result = work(*args)
            self._store.commit([], {})
            return result
        finally:
            self._store.close()

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
