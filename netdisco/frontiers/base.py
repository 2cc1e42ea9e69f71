"""Where scheduled requests wait: the ``Frontier`` contract.

A frontier dedups by fingerprint, orders by priority and tracks requests taken
but not yet done (leases), so that a shared frontier (Redis) can hand a dead
engine's work to the living. Frontiers know nothing about HTTP or spiders: they
queue anything ``Queued``, and a shared one stores it through a ``Codec`` that
the crawl layer supplies (``netdisco.crawl.codec``).

``Frontier`` names every ability the crawl uses. Five are required of every
frontier (``add``, ``claim``, ``take``, ``done``, ``counts``); the others have a
default whose behaviour is written on it, so that a frontier lacking an ability
is a visible decision here, never a silent skip where the crawl uses it:

=====================  ==========================  ===============================
ability                methods                     default
=====================  ==========================  ===============================
connection             ``open``, ``close``         nothing to open or hand back
resume                 ``finished``,               nothing stored: a rerun starts
                       ``stored_stats``,           afresh, the counters from zero
                       ``store_stats``,
                       ``mark_finished``,
                       ``ran_to_end``,
                       ``start_over``
page store             ``pages``                   None: no re-crawls (refused
                                                   at start by ``check_recrawl``)
host ownership         ``owns``, ``use_paces``,    every host is this process's:
                       ``set_politeness``          nothing moves, nothing to pace
lease fence            ``fence``, ``may_start``,   no fence: nobody else can hand
                       ``may_start_now``           this process's leases out
failed store           ``keep_failed``,            kept in this process
                       ``failed``,                 (``failed.MemoryFailed``), gone
                       ``take_failed``,            with it
                       ``delete_failed``
=====================  ==========================  ===============================

Which frontier has which (``memory``, ``state_dir`` SQLite, Redis with owned hosts,
Redis with one queue) is tabled in ``docs/architecture.md``.
"""

from __future__ import annotations

import abc
import shlex
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Generic, Protocol, TypeVar

from netdisco._fence import Fence
from netdisco.frontiers.failed import FailedPage, FailedRecord, MemoryFailed


class Queued(Protocol):
    """What a frontier reads of a queued request."""

    @property
    def url(self) -> str: ...  # for log lines only

    @property
    def fingerprint(self) -> bytes: ...  # the dedup key

    @property
    def priority(self) -> int: ...  # higher first

    @property
    def dont_filter(self) -> bool: ...  # queued even if its fingerprint was seen

    @property
    def host_key(self) -> str: ...  # whose politeness it falls under (one owner each)


R = TypeVar("R", bound=Queued)


class Codec(Protocol[R]):
    """Turns a queued request into text (or compact bytes) another process can read back."""

    def encode(self, request: R) -> str:
        """The request as text; raise ``RequestNotShareable`` if it cannot travel."""
        ...

    def pack(self, request: R) -> bytes:
        """The request compact, for a store that holds many (Redis); the same errors."""
        ...

    def decode(self, raw: bytes | str) -> R:
        """The inverse of ``encode`` and of ``pack``."""
        ...


class PageStore(Protocol):
    """What the last fetch of each page left for the next run, by fingerprint.

    It outlives the run's seen set: a new run starts with an empty seen set and
    the same pages. Records are opaque bytes here: the crawl's ``recrawl`` module
    writes them (validators, when fetched, the links) and reads one it cannot make
    sense of as no record at all.
    """

    async def get_page(self, fingerprint: bytes) -> bytes | None:
        """The record stored for ``fingerprint``, or None."""
        ...

    async def put_page(self, fingerprint: bytes, record: bytes) -> None:
        """Store ``record`` for ``fingerprint`` (kept with the crawl's next commit)."""
        ...

    async def begin_run(self, run: str) -> bool:
        """Start run ``run`` of a finished crawl: its seen set emptied, its pages kept.

        False when that run began already (another engine of a shared crawl began it).
        """
        ...


class PaceBook(Protocol):
    """Where this engine keeps its hosts' paces (``crawl.hosts.ReadyHosts``)."""

    def paces(self, hosts: Iterable[str]) -> dict[str, tuple[float, float]]:
        """Each host that must still rest: seconds since its last start, and its delay."""
        ...

    def seed(self, host: str, rest: float) -> None:
        """``host`` must rest ``rest`` s more before its next start here."""
        ...


class Frontier(abc.ABC, Generic[R]):
    """Every ability the crawl uses of a frontier; see the module docstring's table."""

    #: set by an engine registered in ZooKeeper whose leases others may recover
    #: (``netdisco._fence``); None: nothing fences this frontier's leases
    fence: Fence | None = None

    # -- required ------------------------------------------------------------------

    @abc.abstractmethod
    async def add(self, requests: Sequence[R]) -> list[bool]:
        """Queue each request whose fingerprint is new; say for each whether it was."""

    @abc.abstractmethod
    async def claim(self, requests: Sequence[Queued]) -> list[bool]:
        """Mark each fingerprint seen without queueing it (a redirect's target); say for
        each whether it was new. Every frontier must: a redirect to a page already seen
        is then dropped on every frontier alike."""

    @abc.abstractmethod
    async def take(self) -> R | None:
        """The next request by priority (leased to us), or None if none is queued now."""

    @abc.abstractmethod
    async def done(self, request: R, *, requeue: bool = False) -> None:
        """Release the lease on a request we took: finished, or put back when ``requeue``."""

    @abc.abstractmethod
    async def counts(self) -> tuple[int, int, int]:
        """``(queued, leased, seen)``, across every engine sharing this frontier."""

    async def may_start(self, request: R) -> bool:
        """Wait while the fence is closed; whether ``request`` may still go out (False:
        its lease may be another engine's now; give it back). Default: True."""
        return True

    def may_start_now(self, request: R | None = None) -> bool:
        """Whether a request (a hop of it: ``request``) that passed ``may_start`` may go
        out at this instant: the fence is still open, in the same epoch, and its host
        still ours where hosts are owned (checked with no wait in between and the send,
        so that waiting for the host's turn cannot outlast the lease). Default: True."""
        return True

    def owns(self, host: str) -> bool:
        """Whether requests of ``host`` may start in this engine (False: another engine
        owns the host; a redirect to it is queued for it). Default: every host."""
        return True

    def use_paces(self, book: PaceBook) -> None:
        """Where the crawl keeps its hosts' paces (``crawl.hosts.ReadyHosts``), for a
        frontier that moves hosts between engines. Default: not needed."""

    def set_politeness(self, delay: float, per_host: int) -> None:
        """The crawl's ``download_delay`` and ``per_host_concurrency``, for a frontier
        that moves hosts (a host that comes without its pace rests a delay first).
        Default: ignored."""

    # -- connection ----------------------------------------------------------------

    async def open(self) -> None:
        """Connect, or raise ``FrontierUnavailable`` (or ``StateDirError``) with the reason.
        Default: nothing to open."""

    async def close(self) -> None:
        """Hand back whatever this process still holds, so others can take it, and
        disconnect. Default: nothing to hand back."""

    # -- resume ----------------------------------------------------------------------

    @property
    def finished(self) -> bool:
        """The crawl stored here is recorded as run to its end, so a rerun ends at once.
        Default False: nothing is recorded (a rerun crawls what is queued)."""
        return False

    def stored_stats(self) -> dict[str, int]:
        """The counters saved by the last run. Default: none (a new crawl)."""
        return {}

    def store_stats(self, stats: dict[str, int]) -> None:
        """Save ``stats`` with the next commit. Default: not kept."""

    async def mark_finished(self) -> None:
        """Record, durably, that the crawl ran to its end. Default: not recorded."""

    def start_over(self) -> str:
        """How to crawl again what ran to its end here (said when a rerun fetches
        nothing). Default: a new crawl needs nothing (nothing is kept)."""
        return "run it again"

    async def ran_to_end(self) -> bool:
        """Whether the stored crawl is over, so a new run (re-crawl) may begin on it.
        Default: nothing queued or leased, and something seen."""
        queued, leased, seen = await self.counts()
        return queued == 0 and leased == 0 and seen > 0

    # -- page store ----------------------------------------------------------------

    def pages(self) -> PageStore | None:
        """Where this crawl keeps its pages between runs. Default None: no re-crawls."""
        return None

    # -- failed store (``netdisco.frontiers.failed``) --------------------------------

    async def keep_failed(self, request: R, record: FailedRecord, keep: int) -> int:
        """Keep a request that ended failed (at most ``keep``, the oldest dropped); how
        many are kept now. Default: in this process, gone with it."""
        return self._failed_here().keep(request, record, keep)

    async def failed(self, reason: str | None, offset: int, limit: int) -> FailedPage:
        """The kept failures (of ``reason``, if given), oldest first."""
        return self._failed_here().page(reason, offset, limit)

    async def take_failed(
        self, reason: str | None = None, ids: Sequence[str] | None = None
    ) -> list[R]:
        """Remove the failures of ``reason`` (or with these ``ids``; neither: all) and
        hand back their requests, for the crawl to queue again."""
        return self._failed_here().take(reason, ids)

    async def delete_failed(self, reason: str | None = None) -> int:
        """Forget the failures of ``reason`` (all without one); how many."""
        return len(await self.take_failed(reason))

    def _failed_here(self) -> MemoryFailed[R]:
        store: MemoryFailed[R] | None = self.__dict__.get("_failed_in_memory")
        if store is None:
            store = self.__dict__["_failed_in_memory"] = MemoryFailed()
        return store


def start_over_state_dir(directory: Path) -> str:
    """How to crawl again a ``state_dir`` crawl that ran to its end (SQLite, ``-j N``)."""
    return (
        "set recrawl or age for a new run, or crawl from scratch: delete the state_dir "
        f"(rm -r {shlex.quote(str(directory))}) or use another"
    )
