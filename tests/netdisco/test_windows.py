"""Flow control of owned hosts (``frontiers.redis.windows``), as pure logic."""

from __future__ import annotations

from netdisco.frontiers.redis.windows import CAP_FIRST, Windows


def test_takes_at_once_share_the_room_they_booked() -> None:
    """Workers take at once: the first booking holds the room until its answer, so a
    second take meanwhile asks for nothing (it once asked for the same room again: 4
    requests given back for every one started)."""
    windows = Windows(lambda: None)
    first = windows.book(7)
    assert first == CAP_FIRST
    assert windows.book(7) == 0  # all of it booked by the take on its way
    assert not windows.worth_a_take(7)
    windows.taken(7, ["a", "b", "c"], booked=first)  # it leased 3: the rest is free again
    assert windows.room(7) == CAP_FIRST - 3
    assert windows.book(7) == CAP_FIRST - 3


def test_a_request_given_back_halves_the_window_a_start_grows_it() -> None:
    windows = Windows(lambda: None)
    windows.taken(1, [str(n) for n in range(CAP_FIRST)], booked=windows.book(1))
    windows.left("0", started=False)  # no room for it here
    assert windows.room(1) <= CAP_FIRST // 2 - (CAP_FIRST - 1)  # halved, 15 still waiting
    for n in range(1, CAP_FIRST):
        windows.left(str(n), started=True)
    assert 0 < windows.room(1) < CAP_FIRST
