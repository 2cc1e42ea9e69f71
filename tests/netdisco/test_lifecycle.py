"""A crawl's lifecycle: one table, every move checked, a refused move logged and raised."""

from __future__ import annotations

import itertools

import pytest
import structlog

from netdisco.crawl.lifecycle import ENDINGS, MOVES, STAYS, TERMINAL, Phase, SpiderState, allows
from netdisco.exceptions import InvalidTransition

ACTIONS = sorted({action for _, action in MOVES} | set(STAYS))


@pytest.mark.parametrize(
    ("state", "action"),
    [
        (state, action)
        for state, action in itertools.product(SpiderState, ACTIONS)
        if not allows(state, action)
    ],
)
def test_every_move_the_table_lacks_is_refused_logged_and_changes_nothing(
    state: SpiderState, action: str
) -> None:
    heard: list[SpiderState] = []
    phase = _at(state, heard)
    with structlog.testing.capture_logs() as logs, pytest.raises(InvalidTransition) as refused:
        phase.move(action)
    assert str(refused.value) == f"spider 's' cannot {action} while {state.value}"
    assert phase.state is state
    assert heard == []  # no listener heard of a move
    assert {"event": "crawl_move_refused", "spider": "s", "state": state.value,
            "action": action, "log_level": "warning"} in logs  # fmt: skip


def _at(state: SpiderState, heard: list[SpiderState]) -> Phase:
    """A phase brought to ``state`` through the table's own moves."""
    phase = Phase("s", lambda: heard.append(phase.state))
    path = {
        SpiderState.IDLE: [],
        SpiderState.STARTING: ["start"],
        SpiderState.RUNNING: ["start", "opened"],
        SpiderState.PAUSED: ["start", "opened", "pause"],
        SpiderState.STOPPING: ["start", "opened", "stop"],
        SpiderState.STOPPED: ["start", "opened", "stop", "stopped"],
        SpiderState.FINISHED: ["start", "opened", "finish"],
        SpiderState.FAILED: ["start", "fail"],
    }[state]
    for action in path:
        phase.move(action)
    heard.clear()
    return phase


def test_no_move_leaves_a_terminal_state_and_every_state_is_reachable() -> None:
    assert not [key for key in MOVES if key[0] in TERMINAL]
    reached = {SpiderState.IDLE} | set(MOVES.values())
    assert reached == set(SpiderState)
    assert set(ENDINGS) == TERMINAL


async def test_pause_holds_the_workers_and_a_stop_releases_them() -> None:
    heard: list[SpiderState] = []
    phase = _at(SpiderState.RUNNING, heard)
    assert not phase.paused
    assert phase.move("pause") is SpiderState.PAUSED
    assert phase.paused
    assert phase.move("stop") is SpiderState.STOPPING
    assert not phase.paused
    assert phase.stopping
    await phase.unpaused()
    assert phase.end(SpiderState.STOPPED) is SpiderState.STOPPED
    await phase.ended()
    assert heard == [SpiderState.PAUSED, SpiderState.STOPPING, SpiderState.STOPPED]


def test_actions_that_move_nothing_are_checked_against_the_state() -> None:
    phase = _at(SpiderState.STARTING, [])
    assert phase.move("push") is SpiderState.STARTING  # allowed, and no move
    with pytest.raises(InvalidTransition, match="cannot retry while starting"):
        phase.check("retry")
