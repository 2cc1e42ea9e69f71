"""The failed store: requests that ended failed, kept with why, to be looked at and retried.

Every frontier keeps one (``Frontier.keep_failed`` and the three methods after it):
the memory frontier in this process (the default, :class:`MemoryFailed`), the
``state_dir`` frontier in its SQLite database, the Redis frontier beside its queue,
shared by every engine of the crawl. A record is keyed by the request's fingerprint,
so a request that fails again replaces its record (the newest counts as the last
failure). At most ``keep`` records are kept: beyond, the oldest go and are counted in
``dropped``. The crawl decides what a failure is and its reason
(``netdisco.crawl.failures``); this layer stores what it is given, bounded.
"""

from __future__ import annotations

import json
from collections import Counter, OrderedDict
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Generic, TypeVar

import structlog

from netdisco.exceptions import RequestNotShareable

log = structlog.get_logger(__name__)

T = TypeVar("T")

#: the longest message and URL kept (a record stays small whatever the error said)
MAX_MESSAGE = 500
MAX_URL = 4096
#: the most records one listing returns
MAX_LIMIT = 1000


@dataclass(frozen=True, kw_only=True)
class FailedRecord:
    """One failed request, as ``GET .../failed`` lists it."""

    id: str  # the request's fingerprint, in hex
    url: str
    method: str
    reason: str  # ``http_<status>`` or an error kind (``netdisco.crawl.failures``)
    status: int | None = None  # the HTTP status, for an ``http_*`` reason
    error: str | None = None  # the exception's class
    message: str = ""
    attempts: int = 0
    last_at: float = 0.0  # Unix seconds of the failure

    def bounded(self) -> FailedRecord:
        """The record with its texts cut to size."""
        return FailedRecord(
            **{**asdict(self), "url": self.url[:MAX_URL], "message": self.message[:MAX_MESSAGE]}
        )

    def to_json(self) -> str:
        """Compact JSON, for the stores that keep text."""
        return json.dumps(asdict(self), separators=(",", ":"), ensure_ascii=False)

    @classmethod
    def from_json(cls, text: str | bytes) -> FailedRecord:
        """The inverse of ``to_json``; ``ValueError`` or ``TypeError`` for anything else."""
        data = json.loads(text)
        if not isinstance(data, dict):
            raise ValueError("a failed record is a JSON object")
        return cls(**data)


@dataclass(frozen=True, kw_only=True)
class FailedPage:
    """One page of a listing: the matching records, and counts over the whole store."""

    total: int  # records matching the listing's reason (all of them without one)
    dropped: int  # records dropped since the store began, to stay within ``keep``
    by_reason: dict[str, int] = field(default_factory=dict)  # over the whole store
    records: list[FailedRecord] = field(default_factory=list)


def page_of(
    records: Sequence[FailedRecord], reason: str | None, offset: int, limit: int, dropped: int
) -> FailedPage:
    """A listing of ``records`` (oldest first), for stores that read them all."""
    matching = [r for r in records if reason is None or r.reason == reason]
    return FailedPage(
        total=len(matching),
        dropped=dropped,
        by_reason=dict(Counter(r.reason for r in records)),
        records=matching[offset : offset + min(limit, MAX_LIMIT)],
    )


def selected(record: FailedRecord, reason: str | None, ids: Sequence[str] | None) -> bool:
    """Whether a retry or delete of ``reason`` (or of ``ids``) takes ``record``; neither:
    every record."""
    if ids is not None:
        return record.id in ids
    return reason is None or record.reason == reason


class MemoryFailed(Generic[T]):
    """The failed store of a frontier that keeps nothing beyond the process."""

    def __init__(self) -> None:
        self._records: OrderedDict[str, tuple[FailedRecord, T]] = OrderedDict()
        self.dropped = 0

    def keep(self, request: T, record: FailedRecord, keep: int) -> int:
        """Keep ``record`` (newest last), drop the oldest beyond ``keep``; how many now."""
        self._records.pop(record.id, None)
        self._records[record.id] = (record.bounded(), request)
        while len(self._records) > max(keep, 0):
            self._records.popitem(last=False)
            self.dropped += 1
        return len(self._records)

    def page(self, reason: str | None, offset: int, limit: int) -> FailedPage:
        """A listing, oldest first."""
        records = [record for record, _ in self._records.values()]
        return page_of(records, reason, offset, limit, self.dropped)

    def take(self, reason: str | None, ids: Sequence[str] | None) -> list[T]:
        """Remove the selected records; their requests."""
        chosen = [k for k, (record, _) in self._records.items() if selected(record, reason, ids)]
        return [self._records.pop(key)[1] for key in chosen]

    def count(self) -> int:
        """How many records are kept."""
        return len(self._records)


def encoded(codec: Any, request: Any) -> str:
    """The request as the store keeps it; "" (listed, never retried) when it cannot be
    written down (a callback that is no spider method, say)."""
    try:
        return str(codec.encode(request))
    except RequestNotShareable as exc:
        log.error("failed_request_not_storable", url=request.url, error=str(exc))
        return ""


def decoded(codec: Any, bodies: Sequence[str | bytes]) -> list[Any]:
    """The requests of stored bodies; one that cannot be read is logged and skipped."""
    requests = []
    for body in bodies:
        if not body:
            continue
        try:
            requests.append(codec.decode(body))
        except (RequestNotShareable, ValueError, KeyError, TypeError) as exc:
            log.error("failed_request_unreadable", error=repr(exc))
    return requests


def decode_records(rows: Sequence[Any]) -> list[FailedRecord]:
    """Records from stored JSON texts; one that cannot be read is skipped (a store
    written by another version), never an error of the listing."""
    records = []
    for raw in rows:
        try:
            records.append(FailedRecord.from_json(raw))
        except (ValueError, TypeError):
            continue
    return records
