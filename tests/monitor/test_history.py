"""The dashboard's memory: bounded, tolerant of odd answers, no rate for idle spiders."""

from __future__ import annotations

from monitor.history import History


def spider(
    name: str, state: str = "running", rate: float = 2.0, **more: object
) -> dict[str, object]:
    return {"name": name, "state": state, "pages_per_second": rate, "succeeded": 10,
            "failed": 1, "queue_size": 5, **more}  # fmt: skip


def test_series_are_bounded_and_quiet_spiders_have_no_rate() -> None:
    history = History(points=3)
    for second in range(5):
        history.record(
            "e1", [spider("a", rate=float(second)), spider("b", "finished", 9.0)], second
        )
    body = history.to_json()
    a, b = body["engines"]["e1"]["spiders"]
    assert a["series"] == [[2, 2.0], [3, 3.0], [4, 4.0]]  # the last 3 reads only
    assert (b["pages_per_second"], b["series"][-1]) == (None, [4, None])
    assert history.engine_rate("e1") == 4.0
    states = {"running": 1, "finished": 1}
    expected = {"engines": 1, "spiders": 2, "states": states, "pages": 20, "failed": 2,
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
