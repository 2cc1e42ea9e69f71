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

    def apply(self, op: str, name: str) -> bool:
        """Apply one op if it is valid now; False if it is not."""
        present = name in self.nodes
        if op == "create" and not present:
            self.zxid += 1
            self.nodes[name] = (self.zxid, self.zxid, "running")
        elif op == "delete" and present:
            self.zxid += 1
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

    def look(self) -> View:
        members = {
            name: Member(name=name, czxid=c, session=1, mzxid=m, data={"state": s})
            for name, (c, m, s) in self.nodes.items()
        }
        parent = Parent(czxid=self.root_czxid, cversion=self.cversion, pzxid=self.pzxid)
        return View(members=members, parent=parent)


OPS = [(op, name) for op in ("create", "delete", "update", "leaving") for name in NAMES]


def expected_type(old: Member | None, new: Member | None) -> EventType | None:
    """The specification of one name's event, written independently of the diff's code."""
    if old is None:
        return None if new is None else EventType.ENGINE_JOINED
    if new is None:
        return EventType.ENGINE_LEFT if old.data["state"] == "leaving" else EventType.ENGINE_LOST
    if old.czxid != new.czxid:
        return EventType.ENGINE_RESTARTED
    if old.mzxid != new.mzxid and new.data["state"] != "leaving":
        return EventType.ENGINE_UPDATED
    return None


def check_step(prev: View, cur: View, true_changes: int) -> None:
    result = diff(prev, cur)
    by_name = {c.name: c.type for c in result.changes if c.type is not EventType.CLUSTER_EMPTY}
    for name in NAMES:
        assert by_name.get(name) == expected_type(prev.members.get(name), cur.members.get(name))
    empty = [c for c in result.changes if c.type is EventType.CLUSTER_EMPTY]
    assert len(empty) == (1 if prev.members and not cur.members else 0)
    observed = sum(
        2 if t is EventType.ENGINE_RESTARTED else 1
        for t in by_name.values()
        if t is not EventType.ENGINE_UPDATED
    )
    assert result.unobserved == true_changes - observed  # exact


def test_every_history_of_four_ops_and_every_choice_of_looks() -> None:
    """All op sequences (length 4, two names) x all subsets of moments the monitor looks."""
    histories = 0
    for ops in itertools.product(OPS, repeat=4):
        model = Model()
        looks: list[tuple[View, int]] = [(model.look(), 0)]
        for op, name in ops:
            model.apply(op, name)
            looks.append((model.look(), model.changes))
        for mask in itertools.product((False, True), repeat=len(ops)):
            seen = [looks[0]] + [look for look, keep in zip(looks[1:], mask, strict=True) if keep]
            if seen[-1] is not looks[-1]:
                seen.append(looks[-1])  # the monitor always converges on the last state
            for (prev, before), (cur, after) in itertools.pairwise(seen):
                check_step(prev, cur, after - before)
        histories += 1
    assert histories == len(OPS) ** 4


def test_root_recreated_counts_old_deletes_and_new_creates() -> None:
    old = Model()
    old.apply("create", "a")
    prev = old.look()
    new = Model(zxid=50, root_czxid=40)
    new.apply("create", "b")
    result = diff(prev, new.look())
    assert [(c.type, c.name) for c in result.changes] == [
        (EventType.ENGINE_LOST, "a"),
        (EventType.ENGINE_JOINED, "b"),
    ]
    assert result.unobserved == 0


def test_departing_turns_a_loss_into_a_leave() -> None:
    model = Model()
    model.apply("create", "a")
    prev = model.look()
    model.apply("delete", "a")
    result = diff(prev, model.look(), departing=frozenset({"a"}))
    assert [c.type for c in result.changes] == [EventType.ENGINE_LEFT, EventType.CLUSTER_EMPTY]


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
