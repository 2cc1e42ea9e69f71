"""Where scheduled requests wait: the ``Frontier`` protocol.

A frontier dedups by fingerprint, orders by priority and tracks requests taken
but not yet done (leases), so that a shared frontier (Redis) can hand a dead
engine's work to the living. Frontiers know nothing about HTTP or spiders: they
queue anything ``Queued``, and a shared one stores it through a ``Codec`` that
the crawl layer supplies (``netdisco.crawl.codec``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol, TypeVar, runtime_checkable


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
    def host_key(self) -> str: ...  # whose politeness it falls under (one host queue each)


R = TypeVar("R", bound=Queued)
R_contra = TypeVar("R_contra", bound=Queued, contravariant=True)


class Codec(Protocol[R]):
    """Turns a queued request into text another process can read back, and back."""

    def encode(self, request: R) -> str:
        """The request as text; raise ``RequestNotShareable`` if it cannot travel."""
        ...

    def decode(self, raw: bytes | str) -> R:
        """The inverse of ``encode``."""
        ...


class Frontier(Protocol[R]):
    """The four operations the crawler needs from a frontier."""

    async def add(self, requests: Sequence[R]) -> list[bool]:
        """Queue each request whose fingerprint is new; say for each whether it was."""
        ...

    async def take(self) -> R | None:
        """The next request by priority (leased to us), or None if none is queued now."""
        ...

    async def done(self, request: R, *, requeue: bool = False) -> None:
        """Release the lease on a request we took: finished, or put back when ``requeue``."""
        ...

    async def counts(self) -> tuple[int, int, int]:
        """``(queued, leased, seen)``, across every engine sharing this frontier."""
        ...


@runtime_checkable
class HostReserving(Protocol[R_contra]):
    """A frontier that holds per-host politeness itself, for every engine sharing it.

    What ``take`` hands out already holds one of its host's slots, reserved at the
    frontier's clock, and ``done`` releases it: the crawl must then keep no limits
    of its own, which would hold a slot twice and park requests that hold one.
    """

    def set_politeness(self, delay: float, per_host: int) -> None:
        """The crawl's ``download_delay`` and ``per_host_concurrency``."""

    def responded(self, request: R_contra) -> None:
        """The response to a taken ``request`` has fully arrived (its host's delay runs)."""

    def fetched(self, request: R_contra) -> None:
        """The download of ``request`` is over, response or failure, and no retry of it
        waits: its host's slot may go to another request (``done`` follows later)."""

    async def back_off(self, request: R_contra, seconds: float) -> None:
        """Put a taken ``request`` back and keep its host idle ``seconds`` (429, 503...)."""


@runtime_checkable
class SharedRobots(Protocol):
    """A frontier that keeps robots.txt for every engine: one fetch per host per crawl."""

    async def robots_txt(
        self, origin: str, fetch: Callable[[], Awaitable[str | None]], max_age: float
    ) -> str | None:
        """The rules for ``origin``: cached (``max_age`` s), or fetched by one engine only;
        None, not cached, when ``fetch`` says the site did not answer."""
        ...


@runtime_checkable
class Connected(Protocol):
    """A frontier with a connection (Redis): opened at start, closed at the end.

    ``close`` hands back whatever this engine still holds, so others can take it.
    """

    async def open(self) -> None:
        """Connect, or raise ``FrontierUnavailable`` with the reason."""

    async def close(self) -> None:
        """Hand back our leases and disconnect."""


@runtime_checkable
class Persistent(Protocol):
    """A frontier that outlives the process (SQLite ``state_dir``): a rerun resumes it.

    It remembers that its crawl finished, so that a rerun says so instead of crawling
    again, and keeps the crawl's counters with its commits.
    """

    @property
    def finished(self) -> bool:
        """The crawl stored here ran to its end."""
        ...

    def stored_stats(self) -> dict[str, int]:
        """The counters saved by the last run (empty for a new crawl)."""
        ...

    def store_stats(self, stats: dict[str, int]) -> None:
        """Save ``stats`` with the next commit."""
        ...

    async def mark_finished(self) -> None:
        """Record, durably, that the crawl ran to its end."""
        ...


@runtime_checkable
class Claims(Protocol):
    """A frontier that can mark fingerprints seen without queueing them (redirect targets)."""

    async def claim(self, requests: Sequence[Queued]) -> list[bool]:
        """Mark each request's fingerprint seen; say for each whether it was new."""
        ...


@runtime_checkable
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
