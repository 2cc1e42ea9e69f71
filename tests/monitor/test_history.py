"""The dashboard's memory: rates from counters, bounded, tolerant of odd answers, no rate
for idle spiders, the minutes downsampled for long spans."""

from __future__ import annotations

import math
from typing import Any

import pytest
from aiohttp import web

from monitor.history import MAX_GAP, History
from monitor.http import span_param
from monitor.series import MAX_POINTS, Tier


def spider(
    name: str, state: str = "running", rate: float = 2.0, **more: object
) -> dict[str, object]:
    return {"name": name, "state": state, "pages_per_second": rate, "succeeded": 10,
            "failed": 1, "queue_size": 5, **more}  # fmt: skip


def counted(pages: Any, items: int, failed: int, **more: Any) -> list[Any]:
    return [spider("a", succeeded=pages, items=items, failed=failed, **more)]


def series(history: History, engine: str = "e1", **span: Any) -> list[list[Any]]:
    return list(history.to_json(**span)["engines"][engine]["spiders"][0]["series"])


def test_series_are_bounded_and_quiet_spiders_have_no_rate() -> None:
    history = History(points=3)
    for second in range(5):
        grown: dict[str, Any] = {"succeeded": 10 + 2 * second, "items": 3 * second}
        grown["failed"] = second
        history.record(
            "e1", [spider("a", rate=float(second), **grown), spider("b", "finished", 9.0)], second
        )
    body = history.to_json(now=4)
    a, b = body["engines"]["e1"]["spiders"]
    assert a["series"] == [[2, 2.0, 3.0, 1.0], [3, 2.0, 3.0, 1.0], [4, 2.0, 3.0, 1.0]]
    assert (b["pages_per_second"], b["series"][-1]) == (None, [4, None, None, None])
    assert body["engines"]["e1"]["series"][-1] == [4, 2.0, 3.0, 1.0]  # a's only: b is done
    assert history.engine_rate("e1") == 4.0
    states = {"running": 1, "finished": 1}
    expected = {"engines": 1, "spiders": 2, "states": states, "pages": 28, "failed": 5,
                "queue": 5, "pages_per_second": 4.0}  # fmt: skip
    assert body["totals"] == expected  # the finished spider's queue is empty
    assert b["queue_size"] == 0


def test_a_shared_frontier_is_queued_once_and_pages_of_engines_gone_are_kept() -> None:
    history = History()
    for engine in ("e1", "e2"):
        history.record(engine, [spider("shop", queue_size=483), spider("own", queue_size=7)], 1.0)
    crawls = {("e1", "shop"): "redis-shop", ("e2", "shop"): "redis-shop"}
    gone = [{"name": "shop", "succeeded": 103, "failed": 4}]
    totals = history.to_json(crawls, gone)["totals"]
    assert (totals["queue"], totals["pages"], totals["failed"]) == (483 + 7 + 7, 143, 8)


def test_odd_answers_are_skipped_and_spiders_per_engine_are_capped() -> None:
    history = History(max_spiders=2)
    history.record("e1", {"error": "not a list"})
    assert history.engine_rate("e1") is None
    history.record(
        "e1", ["text", 3, {"name": 7}, spider("a"), spider("a"), spider("b"), spider("c")]
    )
    names = [s["name"] for s in history.to_json()["engines"]["e1"]["spiders"]]
    assert names == ["a", "b"]
    history.record("e2", [spider("x", rate="fast")])  # type: ignore[arg-type]
    assert history.to_json()["engines"]["e2"]["spiders"][0]["pages_per_second"] is None


def test_engines_that_left_are_forgotten() -> None:
    history = History()
    history.record("e1", [spider("a")])
    history.record("e2", [spider("b")])
    assert len(history) == 2
    history.keep_only(["e2"])
    assert list(history.to_json()["engines"]) == ["e2"]
    assert history.engine_rate("e1") is None


def test_a_counter_going_back_is_a_new_run_and_a_gap_not_a_negative_rate() -> None:
    history = History()
    reads = [(0, 100, 50, 4), (5, 150, 60, 4), (10, 3, 1, 0), (15, 13, 6, 5), (16, 13, 6, 5)]
    for second, pages, items, failed in reads:
        history.record("e1", counted(pages, items, failed), second)
    rows = series(history, now=20)
    assert [r[1:] for r in rows] == [
        [None, None, None],  # a first read has nothing to compare with
        [10.0, 2.0, 0.0],
        [None, None, None],  # the counters went back: a new run
        [2.0, 1.0, 1.0],
        [0.0, 0.0, 0.0],
    ]
    history.record("e1", counted(20, 7, 5), 16 + MAX_GAP + 1)
    assert series(history, now=16 + MAX_GAP + 1)[-1][1:] == [None, None, None]  # too long


def test_odd_counters_give_no_rate_and_break_nothing() -> None:
    history = History()
    history.record("e1", counted(10, 0, 0), 0)
    for odd in (-1, "12", True, math.nan, math.inf, 10**400, None, 2.0**60):
        history.record("e1", counted(odd, 0, 0), 1)
        assert series(history, now=1)[-1][1:] == [None, None, None], odd
    history.record("e1", [spider("a", rate=10**400)], 2)
    assert history.to_json()["engines"]["e1"]["spiders"][0]["pages_per_second"] is None


def test_an_engine_sums_its_running_spiders() -> None:
    history = History()
    for second in (0, 10):
        history.record("e1", [spider("a", succeeded=10 * second, items=second, failed=0),
                              spider("b", succeeded=5 * second, items=0, failed=second),
                              spider("c", "paused", succeeded=99 * second)], second)  # fmt: skip
    assert history.to_json(now=10)["engines"]["e1"]["series"] == [
        [0, None, None, None],
        [10, 15.0, 1.0, 1.0],
    ]


def test_long_spans_come_from_the_minutes_downsampled_to_a_bounded_answer() -> None:
    history = History(hours=6)
    start = 1_000_020.0  # 20 s into a minute
    pages = 0
    for n in range(6 * 60 * 12 + 1):  # a read every 5 s for 6 hours
        running = not 100 <= n < 200  # paused for 500 s
        pages += 10 if running else 0
        state = "running" if running else "paused"
        history.record("e1", counted(pages, pages // 2, 0, state=state), start + 5 * n)
    now = start + 5 * 6 * 60 * 12
    body = history.to_json(span=6 * 3600, now=now)
    assert body["step"] == 180
    rows = body["engines"]["e1"]["spiders"][0]["series"]
    assert len(rows) <= MAX_POINTS
    assert all(row[0] % 180 == 0 for row in rows)
    assert rows[1][1:] == [2.0, 1.0, 0.0]
    assert any(row[1] is None for row in rows)  # the 500 s paused span a gap, no rate
    hour = series(history, span=3600, now=now)
    assert (len(hour), hour[-2][0] - hour[-3][0]) == (61, 60)  # 60 minutes and the one begun
    recent = series(history, now=now)
    assert (len(recent), recent[-1]) == (120, [now, 2.0, 1.0, 0.0])  # the reads, as kept


def test_everything_is_bounded() -> None:
    history = History(points=5, hours=1, max_engines=2, max_spiders=1)
    for n in range(3000):
        for engine in ("e1", "e2", "e3"):
            history.record(engine, [spider("a", succeeded=n), spider("b")], 30.0 * n)
    body = history.to_json(span=3600, now=30.0 * 2999)
    assert list(body["engines"]) == ["e1", "e2"]
    assert [len(s["series"]) for s in body["engines"]["e1"]["spiders"]] == [60]
    assert len(series(history, now=30.0 * 2999)) == 5
    tier = Tier(3, 60)
    for minute in range(10):
        tier.add(60.0 * minute, 60, (1.0, 2.0, 3.0))
    assert [row[0] for row in tier.rows(0)] == [420, 480, 540]
    with pytest.raises(ValueError, match="points"):
        History(points=MAX_POINTS + 1)


def test_the_minutes_are_weighted_by_time_and_the_clock_going_back_is_ignored() -> None:
    tier = Tier(10, 60)
    tier.add(10, 10, (6.0, 0.0, 0.0))
    tier.add(40, 30, (2.0, 0.0, 0.0))
    tier.add(50, 10, None)  # not running: no weight
    tier.add(70, 10, (1.0, 0.0, 0.0))
    tier.add(5, 5, (100.0, 0.0, 0.0))  # back into a minute gone: dropped
    assert tier.rows(0) == [[0, 3.0, 0.0, 0.0], [60, 1.0, 0.0, 0.0]]  # (6*10 + 2*30) / 40
    assert tier.rows(0, 120) == [[0, 2.6, 0.0, 0.0]]  # (6*10 + 2*30 + 1*10) / 50


@pytest.mark.parametrize(
    ("raw", "seconds"), [(None, 600.0), ("10m", 600.0), ("1h", 3600.0), ("90s", 90.0)]
)
def test_a_span_is_a_bounded_duration(raw: str | None, seconds: float) -> None:
    assert span_param(raw, 6.0) == seconds


@pytest.mark.parametrize("raw", ["7h", "59s", "0m", "-1h", "1d", "10 m", "1e3s", "", "9" * 99])
def test_a_bad_span_is_a_clear_400(raw: str) -> None:
    with pytest.raises(web.HTTPBadRequest) as info:
        span_param(raw, 6.0)
    assert (info.value.text or "").startswith("span must be a duration like 10m, 1h or 6h")
    assert len(info.value.text or "") < 200


def test_a_departed_engine_keeps_when_its_figures_were_read() -> None:
    """The dashboard says its last figures as a reading with its time: what the engine
    did after that read (its last seconds, in its feed) is not in them."""
    from monitor.departed import Departed
    from monitor.events import Event, EventType

    history = History()
    history.record("e1", [spider("a", items=6)], 7.0)
    assert (history.read_at("e1"), history.read_at("never")) == (7.0, None)
    departed = Departed(retention=60)
    lost = Event(type=EventType.ENGINE_LOST, engine_id="e1", time=8.0)
    departed.add(lost, history.engine("e1"), history.read_at("e1"))
    (entry,) = departed.entries(9.0, lambda *_: None)
    assert entry["spiders_read_at"] == 7.0
    assert entry["spiders_read"][0]["items"] == 6
