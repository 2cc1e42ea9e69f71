"""The pages/s gauge: a one-minute window that does not under-read a young crawl."""

from __future__ import annotations

import pytest

from netdisco.crawl.stats import Rate


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock(1000.0)
    monkeypatch.setattr("netdisco.crawl.stats.time.monotonic", fake)
    return fake


def test_young_rate_is_over_its_age(clock: Clock) -> None:
    rate = Rate()
    for _ in range(10):
        rate.add(30)
        clock.now += 1.0
    assert rate.per_second() == pytest.approx(30.0)


def test_old_events_leave_the_window(clock: Clock) -> None:
    rate = Rate()
    rate.add(600)
    clock.now += 120.0
    rate.add(60)
    clock.now += 0.5
    assert rate.per_second() == pytest.approx(60 / 59.5)


def test_short_window(clock: Clock) -> None:
    rate = Rate()
    for _ in range(100):
        rate.add(10)
        clock.now += 1.0
    assert rate.per_second(5) == pytest.approx(10.0)


def test_no_events_no_rate(clock: Clock) -> None:
    assert Rate().per_second() == 0.0
