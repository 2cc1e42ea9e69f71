"""The outbox's pure parts: identities, episodes, what an entry may hold, Message-IDs."""

from __future__ import annotations

import json

from monitor.daemon import episode
from monitor.events import Event, EventType, same
from monitor.hooks import message_id
from monitor.outbox import MAX_DATA, _event, _fit, _loads, entry_name, neighbour
from monitor.rules import Trip


def test_an_identity_is_the_same_text_in_every_monitor() -> None:
    a = Event(type=EventType.ENGINE_LOST, engine_id="e", identity=same("engine_lost", "e", 7))
    b = Event(type=EventType.ENGINE_LOST, engine_id="e", identity=("engine_lost", "e", "7"))
    other = Event(type=EventType.ENGINE_LOST, identity=same("engine_lost", "e", 8))
    assert a.key == b.key != other.key
    assert entry_name("email", a) == f"email.engine_lost.{a.key}"
    assert Event(type=EventType.ZK_DISCONNECTED).key is None  # the monitor's own


def test_a_lasting_rule_folds_with_the_bucket_before_and_a_run_does_not() -> None:
    assert neighbour(("disk_free_below", "e", "1", "-", "~100")) == (
        "disk_free_below", "e", "1", "-", "~99"
    )  # fmt: skip
    assert neighbour(("spider_failed", "e", "1", "s", "run 12.5")) is None
    assert neighbour(("disk_free_below", "e", "1", "-", "~100.1")) is None  # a next episode
    ended = Trip(EventType.SPIDER_FAILED, "e", "s", {"started_at": 12.5})
    assert episode(ended, 10.0) == "run 12.5"
    lasting = Trip(EventType.SPIDER_STALLED, "e", "s", {})
    assert episode(lasting, 10.0).startswith("~")


def test_an_entry_from_zookeeper_is_checked_and_bounded() -> None:
    assert _loads(b"not json") == {}
    assert _loads(b"[1, 2]") == {}
    assert _event({"identity": ["x"], "event": {"type": "no_such_kind"}}) is None
    assert _event({"identity": [], "event": {"type": "engine_lost"}}) is None
    body = {"type": "engine_lost", "engine_id": 5, "engine": [], "detail": "x", "time": "t"}
    event = _event({"identity": ["a" * 1000] * 40, "event": body})
    assert event is not None
    assert event.engine_id is None
    assert (event.engine, event.detail) == ({}, {})
    assert len(event.identity or ()) == 16
    assert all(len(part) == 300 for part in event.identity or ())
    back = _event(json.loads(json.dumps({"identity": ["engine_lost", "e", "7"],
                                         "event": {"type": "engine_lost", "engine_id": "e",
                                                   "time": 5.0}})))  # fmt: skip
    assert back is not None
    assert (back.engine_id, back.time, back.key) == ("e", 5.0, same_key("engine_lost", "e", 7))


def same_key(*parts: object) -> str | None:
    return Event(type=EventType.ENGINE_LOST, identity=same(*parts)).key


def test_a_message_id_comes_from_the_events_identities() -> None:
    one = Event(type=EventType.ENGINE_LOST, identity=same("engine_lost", "e", 7))
    two = Event(type=EventType.ENGINE_LOST, identity=same("engine_lost", "f", 9))
    assert message_id([one]) == f"<{one.key}@netdisco-monitor>"
    assert message_id([one, two]) == message_id([one, two]) != message_id([two, one])
    own = Event(type=EventType.ZK_DISCONNECTED)
    assert message_id([own]) != message_id([own])  # a fresh one each time


def test_an_entry_too_big_for_its_node_keeps_what_an_alert_needs() -> None:
    huge = {"spiders": ["x" * 1000] * 100}
    event = Event(type=EventType.ENGINE_LOST, engine_id="e", engine=huge, previous=huge,
                  identity=same("engine_lost", "e", 7))  # fmt: skip
    raw = _fit({"state": "pending", "identity": list(event.identity or ()),
                "event": event.to_json()})  # fmt: skip
    assert len(raw) <= MAX_DATA
    back = _event(_loads(raw))
    assert back is not None
    assert (back.engine_id, back.engine, back.key) == ("e", {"id": "e"}, event.key)
