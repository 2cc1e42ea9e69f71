"""Pure snapshots of the engines' znodes, and the diff that turns two into events.

No I/O here: the watcher reads ZooKeeper and hands plain values in, so the rules
that decide what is a join, a leave, a loss or a restart are tested exhaustively
without a server (like kazoo's ``_prior_children`` comparison, pulled out).

A member is a *node*, not a name: ``(name, czxid)``. The same name with another
czxid is a new node, i.e. a restart. The parent's ``cversion`` counts every
create and delete of a child, so the difference between its delta and the
changes a diff sees is the number of changes too fast to observe. Whether a
node that is gone left or was lost is a fact the caller reads from ZooKeeper
(its tombstone, :func:`gone`) and hands to :func:`diff`.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from netdisco.cluster.contract import (
    EnginePayload,
    EventType,
    decode_object,
    payload_from_dict,
)


@dataclass(frozen=True, kw_only=True)
class Member:
    """One engine node as last read: its identity (czxid, session) and data."""

    name: str
    czxid: int
    session: int  # the node's ephemeralOwner
    mzxid: int = 0
    data: Mapping[str, Any] = field(default_factory=dict)
    garbage: bool = False  # data was not a UTF-8 JSON object
    since: float = 0.0  # wall time this node was first seen

    @property
    def payload(self) -> EnginePayload:
        """The node's data, typed (``docs/architecture.md``, the znode contract)."""
        return payload_from_dict(self.data)

    @property
    def state(self) -> str:
        """The engine's own state ("running", "leaving"), or "unknown"."""
        return self.payload.state

    @property
    def leaving(self) -> bool:
        """Whether the engine's last data said it is leaving."""
        return self.payload.leaving

    def describe(self) -> dict[str, Any]:
        """The engine's last known data as events and HTTP routes show it."""
        return {
            **self.data,
            "id": self.name,
            "state": self.state,
            "czxid": self.czxid,
            "session": f"0x{self.session:x}",
            "since": self.since,
            "garbage": self.garbage,
        }


@dataclass(frozen=True, kw_only=True)
class Parent:
    """What a listing says about the root itself."""

    czxid: int
    cversion: int
    pzxid: int


@dataclass(frozen=True, kw_only=True)
class View:
    """The members as of one listing of the root, with that listing's parent stat."""

    members: Mapping[str, Member] = field(default_factory=dict)
    parent: Parent = Parent(czxid=0, cversion=0, pzxid=0)


@dataclass(frozen=True, kw_only=True)
class Change:
    """One difference between two views."""

    type: EventType
    name: str
    member: Member  # the current node, or the last known one if it is gone
    previous: Member | None = None
    left: bool = False  # the node that is gone (``member`` or ``previous``) left gracefully


@dataclass(frozen=True, kw_only=True)
class Diff:
    """The changes between two views and the changes nobody could see."""

    changes: tuple[Change, ...]
    unobserved: int


def parse_data(raw: bytes | None) -> tuple[dict[str, Any], bool]:
    """Decode znode data; return ``(data, garbage)``. Garbage keeps what is known: nothing."""
    data = decode_object(raw)
    return ({}, True) if data is None else (data, False)


def member_of(name: str, raw: bytes | None, stat: Any) -> Member:
    """The member a read of ``<root>/<name>`` (its data and ``ZnodeStat``) shows."""
    data, garbage = parse_data(raw)
    return Member(
        name=name,
        czxid=stat.czxid,
        session=stat.ephemeralOwner,
        mzxid=stat.mzxid,
        data=data,
        garbage=garbage,
    )


def assemble(
    prev: View,
    names: Iterable[str],
    reads: Mapping[str, Member | None],
    parent: Parent,
    now: float,
) -> tuple[View, set[str]]:
    """Build the view as of a listing from fresh reads and the previous view.

    ``names`` are the listed children; ``reads`` the children read after the
    listing (``None``: gone by then). A child gone or re-created after the
    listing (czxid newer than the listing's pzxid) is not the listed node: its
    previous state is kept and its name returned for another look, so that the
    view and the parent's cversion always describe the same moment.
    """
    members: dict[str, Member] = {}
    retry: set[str] = set()
    for name in names:
        old = prev.members.get(name)
        if name not in reads:
            if old is None:
                retry.add(name)
            else:
                members[name] = old
            continue
        new = reads[name]
        if new is None or new.czxid > parent.pzxid:
            retry.add(name)
            if old is not None:
                members[name] = old
            continue
        same_node = old is not None and old.czxid == new.czxid
        members[name] = replace(new, since=old.since if old and same_node else now)
    return View(members=members, parent=parent), retry


def gone(prev: View, cur: View) -> list[Member]:
    """The nodes of ``prev`` that ``cur`` lacks: removed, or replaced by a restart."""
    return [
        old
        for name, old in prev.members.items()
        if (new := cur.members.get(name)) is None or new.czxid != old.czxid
    ]


def _believed(member: Member) -> bool:
    return True


def has_left(
    member: Member, left: Collection[tuple[str, int]], proven: Callable[[Member], bool] = _believed
) -> bool:
    """A gone node left if its tombstone was found, or its last data said ``leaving``
    (and ``proven`` accepts that data: netdisco.cluster.proof)."""
    return (member.leaving and proven(member)) or (member.name, member.czxid) in left


def _common_change(
    old: Member, new: Member, left: Collection[tuple[str, int]], proven: Callable[[Member], bool]
) -> Change | None:
    if old.czxid != new.czxid:
        return Change(
            type=EventType.ENGINE_RESTARTED,
            name=new.name,
            member=new,
            previous=old,
            left=has_left(old, left, proven),
        )
    if old.mzxid != new.mzxid and not new.leaving:
        return Change(type=EventType.ENGINE_UPDATED, name=new.name, member=new, previous=old)
    return None


def diff(
    prev: View,
    cur: View,
    left: Collection[tuple[str, int]] = frozenset(),
    proven: Callable[[Member], bool] = _believed,
) -> Diff:
    """Every change from ``prev`` to ``cur``, in the order users expect to read them.

    ``left`` holds the gone nodes ``(name, czxid)`` known to have left gracefully
    (their tombstone exists); any other gone node was lost, unless its last data
    said ``leaving`` and ``proven`` accepts it.
    """
    changes: list[Change] = []
    for name in sorted(prev.members.keys() - cur.members.keys()):
        member = prev.members[name]
        graceful = has_left(member, left, proven)
        kind = EventType.ENGINE_LEFT if graceful else EventType.ENGINE_LOST
        changes.append(Change(type=kind, name=name, member=member, left=graceful))
    restarted = 0
    for name in sorted(prev.members.keys() & cur.members.keys()):
        change = _common_change(prev.members[name], cur.members[name], left, proven)
        if change is not None:
            restarted += change.type is EventType.ENGINE_RESTARTED
            changes.append(change)
    added = sorted(cur.members.keys() - prev.members.keys())
    changes.extend(
        Change(type=EventType.ENGINE_JOINED, name=name, member=cur.members[name]) for name in added
    )
    if prev.members and not cur.members:
        last = next(iter(prev.members.values()))
        changes.append(Change(type=EventType.CLUSTER_EMPTY, name="", member=last))
    removed = len(prev.members.keys() - cur.members.keys())
    observed = len(added) + removed + 2 * restarted
    return Diff(changes=tuple(changes), unobserved=max(0, _delta(prev, cur, removed) - observed))


def _delta(prev: View, cur: View, removed: int) -> int:
    """Creates and deletes of children between two listings, per the parent's cversion.

    A root deleted and re-created restarts its cversion: the deletes seen are
    then counted as the old root's (a lower bound: its other changes are unknown).
    """
    if prev.parent.czxid == cur.parent.czxid:
        return cur.parent.cversion - prev.parent.cversion
    return cur.parent.cversion + removed


def view_to_json(view: View) -> dict[str, Any]:
    """The persisted form of a view (``state_file``)."""
    return {
        "parent": {
            "czxid": view.parent.czxid,
            "cversion": view.parent.cversion,
            "pzxid": view.parent.pzxid,
        },
        "members": [
            {
                "name": m.name,
                "czxid": m.czxid,
                "session": m.session,
                "mzxid": m.mzxid,
                "data": dict(m.data),
                "garbage": m.garbage,
                "since": m.since,
            }
            for m in view.members.values()
        ],
    }


def view_from_json(raw: Mapping[str, Any]) -> View:
    """Inverse of :func:`view_to_json`; raises ``KeyError``/``TypeError`` on a bad file."""
    parent = Parent(**{k: int(raw["parent"][k]) for k in ("czxid", "cversion", "pzxid")})
    members = {}
    for item in raw["members"]:
        member = Member(
            name=str(item["name"]),
            czxid=int(item["czxid"]),
            session=int(item["session"]),
            mzxid=int(item["mzxid"]),
            data=dict(item["data"]),
            garbage=bool(item["garbage"]),
            since=float(item["since"]),
        )
        members[member.name] = member
    return View(members=members, parent=parent)
