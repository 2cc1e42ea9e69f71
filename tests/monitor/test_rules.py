"""The health rules as pure logic: successive observations in, trips out (no I/O)."""

from __future__ import annotations

from typing import Any

from monitor.rules import Rules, spider_changes
from monitor.settings import RuleSettings
from netdisco.cluster.contract import EventType

SETTINGS = RuleSettings(grace=10.0, rearm=60.0, stall_after=30.0, error_min_requests=10,
                        error_ratio=0.5, error_window=100.0, disk_free_below=1000)  # fmt: skip


def spider(**status: Any) -> list[dict[str, Any]]:
    base = {"name": "shop", "state": "running", "started_at": 1.0, "succeeded": 0,
            "failed": 0, "items": 0, "queue_size": 5}  # fmt: skip
    return [{**base, **status}]


def kinds(trips: list[Any]) -> list[str]:
    return [t.type.value for t in trips]


def test_a_failed_run_is_reported_once_and_the_next_run_again() -> None:
    rules = Rules(SETTINGS)
    failed = spider(state="failed", last_error="x" * 1000)
    first = rules.spiders("a", failed, 0.0)
    assert kinds(first) == ["spider_failed"]
    assert first[0].spider == "shop"
    assert len(first[0].figures["error"]) == 300
    assert rules.spiders("a", failed, 5.0) == []
    assert kinds(rules.spiders("a", spider(state="failed", started_at=2.0), 9.0)) == [
        "spider_failed"
    ]


def test_finished_empty_below_min_items_only() -> None:
    rules = Rules(RuleSettings(min_items=3))
    assert kinds(rules.spiders("a", spider(state="finished", items=2), 0.0)) == [
        "spider_finished_empty"
    ]
    assert rules.spiders("a", spider(state="finished", items=2), 1.0) == []
    assert rules.spiders("b", spider(state="finished", items=3), 0.0) == []
    assert Rules(RuleSettings(min_items=0)).spiders("a", spider(state="finished"), 0.0) == []


def test_stalled_after_stall_after_with_a_queue_not_when_paused_or_moving() -> None:
    rules = Rules(SETTINGS)
    assert rules.spiders("a", spider(succeeded=3), 0.0) == []
    assert rules.spiders("a", spider(succeeded=3), 29.0) == []
    trips = rules.spiders("a", spider(succeeded=3), 31.0)
    assert kinds(trips) == ["spider_stalled"]
    assert trips[0].figures["quiet_for"] == 31.0
    assert rules.spiders("a", spider(succeeded=3), 50.0) == []  # once, not every poll
    paused = Rules(SETTINGS)
    for at in (0.0, 40.0, 80.0):
        assert paused.spiders("a", spider(state="paused"), at) == []
    empty = Rules(SETTINGS)
    for at in (0.0, 40.0):
        assert empty.spiders("a", spider(queue_size=0), at) == []
    moving = Rules(SETTINGS)
    for at in range(0, 100, 20):
        assert moving.spiders("a", spider(succeeded=at), float(at)) == []


def test_error_ratio_waits_grace_fires_once_and_rearms_only_after_clear() -> None:
    rules = Rules(SETTINGS)
    assert rules.spiders("a", spider(), 0.0) == []
    assert rules.spiders("a", spider(succeeded=4, failed=16), 5.0) == []  # within grace
    trips = rules.spiders("a", spider(succeeded=5, failed=20), 16.0)
    assert kinds(trips) == ["spider_error_ratio"]
    assert trips[0].figures["ratio"] == 0.8
    assert trips[0].figures["requests"] == 25
    # wobbling around the threshold is the same condition: no second event
    seen = []
    for i, at in enumerate(range(20, 200, 10)):
        bad = i % 2 == 0
        seen += rules.spiders(
            "a", spider(succeeded=5 + i * 10, failed=20 + i * (12 if bad else 1)), at
        )
    assert seen == []


def test_error_ratio_needs_enough_requests() -> None:
    rules = Rules(SETTINGS)
    for at in (0.0, 20.0, 40.0):
        assert rules.spiders("a", spider(failed=int(at // 10)), at) == []


def test_a_stalled_loop_and_its_recovery_each_once() -> None:
    rules = Rules(RuleSettings(loop_grace=0.0))
    assert kinds(rules.engine("a", {"stalled": True, "loop_lag": 7.25}, 0.0)) == ["engine_stalled"]
    assert rules.engine("a", {"stalled": True}, 1.0) == []
    assert kinds(rules.engine("a", {"stalled": False}, 2.0)) == ["engine_recovered"]
    assert rules.engine("a", {"stalled": False}, 3.0) == []
    assert rules.engine("b", {"stalled": "yes"}, 0.0) == []  # not a bool: unknown


def test_a_short_stall_within_grace_is_nothing() -> None:
    rules = Rules(RuleSettings(loop_grace=5.0))
    assert rules.engine("a", {"stalled": True}, 0.0) == []
    assert rules.engine("a", {"stalled": False}, 2.0) == []
    assert rules.engine("a", {"stalled": True}, 3.0) == []


def test_disk_free_below_per_disk_once_and_bad_values_ignored() -> None:
    rules = Rules(RuleSettings(grace=0.0, rearm=60.0, disk_free_below=1000))
    data = {"facts": {"disk_free": {"state": 10, "feeds": 5000, "../x\n": 1, "y": -1, "z": True}}}
    trips = rules.engine("a", data, 0.0)
    assert [(t.type, t.figures["disk"], t.figures["free"]) for t in trips] == [
        (EventType.DISK_FREE_BELOW, "state", 10)
    ]
    assert rules.engine("a", data, 10.0) == []
    rules.engine("a", {"facts": {"disk_free": {"state": 5000}}}, 20.0)  # clear, not for long
    assert rules.engine("a", data, 30.0) == []
    rules.engine("a", {"facts": {"disk_free": {"state": 5000}}}, 40.0)
    rules.engine("a", {"facts": {"disk_free": {"state": 5000}}}, 101.0)  # clear 61 s: re-armed
    assert kinds(rules.engine("a", data, 102.0)) == ["disk_free_below"]


def test_garbage_from_an_engine_trips_nothing() -> None:
    rules = Rules(SETTINGS)
    for body in ({"spiders": 1}, [1, "x", {"name": 5}, {"name": "a" * 500, "state": "failed"}],
                 [{"name": "s", "state": "failed", "started_at": "now"}] * 2):  # fmt: skip
        rules.spiders("a", body, 0.0)
    assert rules.engine("a", {"facts": "x"}, 0.0) == []


def test_spider_changes_say_what_changed() -> None:
    before = {
        "spiders": [{"name": "shop", "state": "running"}, {"name": "news", "state": "paused"}]
    }
    after = {"spiders": [{"name": "shop", "state": "paused"}, {"name": "news", "state": "running"},
                         {"name": "blog", "state": "finished"}]}  # fmt: skip
    assert [(k.value, s, o, n) for k, s, o, n in spider_changes(before, after)] == [
        ("spider_paused", "shop", "running", "paused"),
        ("spider_resumed", "news", "paused", "running"),
        ("spider_finished", "blog", None, "finished"),
    ]
    assert spider_changes(after, after) == []


def test_items_invalid_once_a_run_when_the_count_reaches_the_rule() -> None:
    rules = Rules(RuleSettings(items_invalid=3))
    assert rules.spiders("a", spider(items_invalid=2), 0.0) == []
    trips = rules.spiders("a", spider(items_invalid=3), 1.0)
    assert kinds(trips) == ["spider_items_invalid"]
    assert (trips[0].figures["items_invalid"], trips[0].figures["threshold"]) == (3, 3)
    assert rules.spiders("a", spider(items_invalid=40), 2.0) == []  # once for this run
    assert kinds(rules.spiders("a", spider(items_invalid=5, started_at=2.0), 3.0)) == [
        "spider_items_invalid"  # the next run
    ]
    assert rules.spiders("a", spider(items_invalid="9", started_at=3.0), 4.0) == []  # garbage
    assert Rules(RuleSettings(items_invalid=0)).spiders("a", spider(items_invalid=9), 0.0) == []


# -- the clock: lasting conditions reported while nothing new is read -------------------


def ticks(rules: Rules, start: float, end: float, answers_within: float = 15.0) -> list[str]:
    """Every trip of a clock ticking once a second from ``start`` to ``end``."""
    out: list[str] = []
    for second in range(int(start), int(end) + 1):
        out += kinds(rules.tick(float(second), answers_within))
    return out


def test_a_loop_stuck_for_good_is_reported_on_the_clock_once() -> None:
    """One znode read says stalled, then nothing for 40 s: reported within loop_grace."""
    rules = Rules(RuleSettings(loop_grace=1.0, grace=30.0))
    assert rules.engine("a", {"stalled": True, "loop_lag": 5.2}, 0.0) == []
    assert ticks(rules, 0, 0) == []
    assert ticks(rules, 1, 40) == ["engine_stalled"]  # at 1 s, once in 40
    assert kinds(rules.engine("a", {"stalled": False}, 41.0)) == ["engine_recovered"]
    assert ticks(rules, 42, 60) == []


def test_an_error_ratio_that_lasts_fires_once_on_the_clock() -> None:
    rules = Rules(SETTINGS)
    rules.spiders("a", spider(succeeded=0, failed=0), 0.0)
    assert rules.spiders("a", spider(succeeded=5, failed=15), 1.0) == []
    assert ticks(rules, 2, 10) == []  # within grace (10 s)
    assert ticks(rules, 11, 14) == ["spider_error_ratio"]  # once, at 11 s


def test_a_spider_with_no_pages_is_stalled_on_the_clock_while_its_engine_answers() -> None:
    rules = Rules(SETTINGS)  # stall_after 30 s
    rules.spiders("a", spider(succeeded=3), 0.0)
    for second in range(5, 26, 5):  # the engine answers every 5 s, with no new page
        rules.spiders("a", spider(succeeded=3), float(second))
    assert ticks(rules, 26, 29) == []
    assert ticks(rules, 30, 40) == ["spider_stalled"]  # once, at 30 s


def test_no_spider_rule_on_the_clock_for_an_engine_that_stopped_answering() -> None:
    rules = Rules(SETTINGS)
    rules.spiders("a", spider(succeeded=3), 0.0)  # then no answer at all
    assert ticks(rules, 1, 100, answers_within=15.0) == []


def test_low_disk_that_lasts_fires_once_on_the_clock() -> None:
    rules = Rules(SETTINGS)  # grace 10 s, disk_free_below 1000
    assert rules.engine("a", {"facts": {"disk_free": {"/": 10}}}, 0.0) == []
    assert ticks(rules, 1, 30) == ["disk_free_below"]
