"""The pure diff, tested exhaustively against a model of a ZooKeeper parent node."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import pytest

from monitor.events import EventType
from netdisco.cluster.membership import (
    Member,
    Parent,
    View,
    assemble,
    diff,
    gone,
    parse_data,
    view_from_json,
    view_to_json,
)

NAMES = ("a", "b")


@dataclass
class Model:
    """A parent znode: zxid, cversion and pzxid move exactly as ZooKeeper moves them."""

    zxid: int = 1
    cversion: int = 0
    pzxid: int = 1
    root_czxid: int = 1
    nodes: dict[str, tuple[int, int, str]] = field(default_factory=dict)  # czxid, mzxid, state
    changes: int = 0  # creates + deletes so far
    tombstones: set[tuple[str, int]] = field(default_factory=set)  # (name, czxid) that left

    def apply(self, op: str, name: str) -> bool:
        """Apply one op if it is valid now; False if it is not."""
        present = name in self.nodes
        if op == "create" and not present:
            self.zxid += 1
            self.nodes[name] = (self.zxid, self.zxid, "running")
        elif op in ("delete", "leave") and present:
            self.zxid += 2 if op == "leave" else 1  # a leave: one transaction, three zxids
            if op == "leave":
                self.tombstones.add((name, self.nodes[name][0]))
            del self.nodes[name]
        elif op in ("update", "leaving") and present:
            self.zxid += 1
            czxid, _, _ = self.nodes[name]
            self.nodes[name] = (czxid, self.zxid, "running" if op == "update" else "leaving")
            return True
        else:
            return False
        self.cversion += 1
        self.pzxid = self.zxid
        self.changes += 1
        return True

    def look(self) -> tuple[View, Tombs]:
        """The view a listing gives, and the tombstones a read behind it finds."""
        members = {
            name: Member(name=name, czxid=c, session=1, mzxid=m, data={"state": s})
            for name, (c, m, s) in self.nodes.items()
        }
        parent = Parent(czxid=self.root_czxid, cversion=self.cversion, pzxid=self.pzxid)
        return View(members=members, parent=parent), frozenset(self.tombstones)


OPS = [(op, name) for op in ("create", "delete", "leave", "update", "leaving") for name in NAMES]


Tombs = frozenset[tuple[str, int]]


def expected(old: Member | None, new: Member | None, tombs: Tombs) -> tuple[EventType | None, bool]:
    """The specification of one name's event (and whether the gone node left)."""
    if old is None:
        return (EventType.ENGINE_JOINED if new is not None else None), False
    left = old.data["state"] == "leaving" or (old.name, old.czxid) in tombs
    if new is None:
        return (EventType.ENGINE_LEFT if left else EventType.ENGINE_LOST), left
    if old.czxid != new.czxid:
        return EventType.ENGINE_RESTARTED, left
    if old.mzxid != new.mzxid and new.data["state"] != "leaving":
        return EventType.ENGINE_UPDATED, False
    return None, False


def check_step(prev: View, cur: View, tombs: Tombs, true_changes: int) -> None:
    left = {(m.name, m.czxid) for m in gone(prev, cur)} & tombs
    result = diff(prev, cur, left)
    by_name = {c.name: c for c in result.changes if c.type is not EventType.CLUSTER_EMPTY}
    for name in NAMES:
        change = by_name.get(name)
        got: tuple[EventType | None, bool] = (change.type, change.left) if change else (None, False)
        assert got == expected(prev.members.get(name), cur.members.get(name), tombs)
    empty = [c for c in result.changes if c.type is EventType.CLUSTER_EMPTY]
    assert len(empty) == (1 if prev.members and not cur.members else 0)
    observed = sum(
        2 if c.type is EventType.ENGINE_RESTARTED else 1
        for c in by_name.values()
        if c.type is not EventType.ENGINE_UPDATED
    )
    assert result.unobserved == true_changes - observed  # exact


def test_every_history_of_four_ops_and_every_choice_of_looks() -> None:
    """All op sequences (length 4, two names) x all subsets of moments the monitor looks."""
    histories = 0
    for ops in itertools.product(OPS, repeat=4):
        model = Model()
        looks: list[tuple[tuple[View, Tombs], int]] = [(model.look(), 0)]
        for op, name in ops:
            model.apply(op, name)
            looks.append((model.look(), model.changes))
        for mask in itertools.product((False, True), repeat=len(ops)):
            seen = [looks[0]] + [look for look, keep in zip(looks[1:], mask, strict=True) if keep]
            if seen[-1] is not looks[-1]:
                seen.append(looks[-1])  # the monitor always converges on the last state
            for ((prev, _), before), ((cur, tombs), after) in itertools.pairwise(seen):
                check_step(prev, cur, tombs, after - before)
        histories += 1
    assert histories == len(OPS) ** 4


def test_root_recreated_counts_old_deletes_and_new_creates() -> None:
    old = Model()
    old.apply("create", "a")
    prev, _ = old.look()
    new = Model(zxid=50, root_czxid=40)
    new.apply("create", "b")
    result = diff(prev, new.look()[0])
    assert [(c.type, c.name) for c in result.changes] == [
        (EventType.ENGINE_LOST, "a"),
        (EventType.ENGINE_JOINED, "b"),
    ]
    assert result.unobserved == 0


def test_a_tombstone_turns_a_loss_into_a_leave_and_names_the_node() -> None:
    model = Model()
    model.apply("create", "a")
    prev, _ = model.look()
    model.apply("leave", "a")
    cur, tombs = model.look()
    assert [c.type for c in diff(prev, cur).changes] == [
        EventType.ENGINE_LOST,
        EventType.CLUSTER_EMPTY,
    ]
    assert [c.type for c in diff(prev, cur, tombs).changes] == [
        EventType.ENGINE_LEFT,
        EventType.CLUSTER_EMPTY,
    ]
    other_node = {("a", prev.members["a"].czxid + 1)}  # a tombstone of another node of "a"
    assert diff(prev, cur, other_node).changes[0].type is EventType.ENGINE_LOST


def _member(name: str, czxid: int, mzxid: int | None = None, since: float = 0.0) -> Member:
    return Member(name=name, czxid=czxid, session=7, mzxid=mzxid or czxid, since=since)


def test_assemble_keeps_the_listed_node_when_a_read_is_newer() -> None:
    prev = View(
        members={"a": _member("a", 3, since=100.0)}, parent=Parent(czxid=1, cversion=1, pzxid=3)
    )
    parent = Parent(czxid=1, cversion=4, pzxid=9)
    reads = {"a": _member("a", 12), "b": None, "c": _member("c", 8), "d": _member("d", 10)}
    view, retry = assemble(prev, ["a", "b", "c", "d"], reads, parent, now=200.0)
    assert view.members["a"].czxid == 3  # re-created after the listing: keep what was listed
    assert view.members["a"].since == 100.0
    assert "b" not in view.members  # gone before it could be read, never seen
    assert view.members["c"].since == 200.0
    assert "d" not in view.members
    assert retry == {"a", "b", "d"}


def test_assemble_reuses_unread_members_and_keeps_since() -> None:
    prev = View(
        members={"a": _member("a", 3, since=5.0)}, parent=Parent(czxid=1, cversion=1, pzxid=3)
    )
    view, retry = assemble(prev, ["a", "z"], {"a": _member("a", 3, 6)}, prev.parent, now=9.0)
    assert view.members["a"].since == 5.0
    assert view.members["a"].mzxid == 6
    assert retry == {"z"}  # listed but neither read nor known


@pytest.mark.parametrize(
    ("raw", "garbage"),
    [
        (b'{"id": "e", "state": "running"}', False),
        (b"\xff\xfe", True),
        (b"not json", True),
        (b"[1, 2]", True),
        (b"", True),
        (None, True),
    ],
)
def test_parse_data(raw: bytes | None, garbage: bool) -> None:
    data, bad = parse_data(raw)
    assert bad is garbage
    assert (data == {}) is garbage


def test_member_describe_and_state() -> None:
    member = Member(name="e1", czxid=5, session=255, data={"state": 3, "host": "h"})
    assert member.state == "unknown"
    described = member.describe()
    assert described["id"] == "e1"
    assert described["session"] == "0xff"
    assert described["host"] == "h"


def test_view_json_round_trip() -> None:
    view = View(
        members={"a": Member(name="a", czxid=3, session=9, mzxid=4, data={"x": [1]}, since=1.5)},
        parent=Parent(czxid=1, cversion=7, pzxid=3),
    )
    assert view_from_json(view_to_json(view)) == view
