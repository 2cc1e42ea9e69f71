"""The leave-vs-crash rule for engines of contract 1, which leave no tombstone.

Such an engine leaves by writing ``state: leaving`` and deleting its node in
one transaction. The write uses up the monitor's one-shot data watch, so the
``leaving`` data is often never read; what is left is timing: a deletion
notified within ``LEGACY_LEAVE_WINDOW`` of a write was made by a live client.
Under load this misreads leaves as losses, which is why contract 2 engines
leave a tombstone instead (``netdisco.cluster.tombstones``); this rule is only
the fallback for older engines.
"""

from __future__ import annotations

import time

from netdisco.cluster.contract import LEGACY_LEAVE_WINDOW
from netdisco.cluster.membership import View


class LeaveTimes:
    """When data changes and deletions were notified, per engine name (monotonic)."""

    def __init__(self) -> None:
        self.written: dict[str, float] = {}
        self.deleted: dict[str, float] = {}
        self.listing_sent = 0.0  # when the current listing was sent

    def changed(self, name: str) -> None:
        self.written[name] = time.monotonic()

    def gone(self, name: str, *, first: bool = False) -> None:
        """A deletion notified (or, ``first``, a read that found no node)."""
        if first:
            self.deleted.setdefault(name, time.monotonic())
        else:
            self.deleted[name] = time.monotonic()

    def departing(self, prev: View, view: View, listed_at: float) -> frozenset[str]:
        """Removed nodes deleted right after a write: their engine deleted them, it left.

        An engine's own write renews its session, so ZooKeeper cannot expire it
        within a session timeout of that write: a deletion that soon after a
        write was made by a live client. The deletion time is taken as the first
        of: its notification, a read finding no node, the sending of the listing
        without it (not the reply, which a busy loop may handle late). A write
        noticed after that was handed over late: the listing's arrival bounds it.
        """
        departing = set()
        for name in prev.members.keys() - view.members.keys():
            written = self.written.get(name)
            deleted = min(self.deleted.get(name, self.listing_sent), self.listing_sent)
            if written is not None and deleted < written:
                deleted = listed_at
            if written is not None and deleted - written <= LEGACY_LEAVE_WINDOW:
                departing.add(name)
        return frozenset(departing)

    def forget(self, prev: View, view: View, listed_at: float) -> None:
        """Drop notification times that can no longer explain a future removal.

        Times up to the listing belong to a node that is now gone or replaced;
        later ones may already be about its successor, so they stay.
        """
        now = time.monotonic()
        for name in list(self.written.keys() | self.deleted.keys()):
            old, new = prev.members.get(name), view.members.get(name)
            if new is None or (old is not None and old.czxid != new.czxid):
                for times in (self.written, self.deleted):
                    if times.get(name, now) <= listed_at:
                        times.pop(name)
            elif now - self.written.get(name, now) > 60.0:
                self.written.pop(name)
