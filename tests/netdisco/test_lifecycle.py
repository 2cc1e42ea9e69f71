"""A crawl's lifecycle: one table, every move checked, a refused move logged and raised."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterator
from typing import Any

import pytest
from structlog.testing import capture_logs

from netdisco import Crawler, Response, Settings, Spider
from netdisco.crawl.lifecycle import ENDINGS, MOVES, STAYS, TERMINAL, Phase, SpiderState, allows
from netdisco.crawl.transport import MockHandler
from netdisco.exceptions import InvalidTransition
from netdisco.testing import eventually

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
    with capture_logs() as logs, pytest.raises(InvalidTransition) as refused:
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


class _Pages(Spider):
    name = "pages"
    start_urls = ("http://site.test/a",)

    def parse(self, response: Response) -> Iterator[Any]:
        yield {"url": response.url}


def _crawler() -> tuple[Crawler, MockHandler]:
    handler = MockHandler.pages({"http://site.test/a": "<title>a</title>"})
    settings = Settings(obey_robots=False, progress_interval=0)
    return Crawler(_Pages(), settings, download_handler=handler), handler


async def test_a_stop_while_the_crawl_opens_closes_it_once_open_with_nothing_fetched() -> None:
    crawler, handler = _crawler()
    gate = asyncio.Event()
    opening = crawler.frontier.open

    async def slow_open() -> None:  # a Redis that takes its time to answer
        await gate.wait()
        await opening()

    crawler.frontier.open = slow_open  # type: ignore[method-assign]
    heard: list[str] = []
    crawler.add_listener(lambda c: heard.append(c.state.value))
    starting = asyncio.create_task(crawler.start())
    await eventually(lambda: crawler.state is SpiderState.STARTING, "starting")
    stopping = asyncio.create_task(crawler.stop())
    await eventually(lambda: crawler.state is SpiderState.STOPPING, "a stop taken while opening")
    assert not stopping.done()  # it waits for the crawl to end, not only for the move
    gate.set()
    await starting
    assert await asyncio.wait_for(stopping, 30) is SpiderState.STOPPED
    assert heard == ["starting", "stopping", "stopped"]
    assert crawler.stats.succeeded == 0
    assert handler.requests == []


async def test_a_real_crawl_refuses_an_illegal_move_and_says_so() -> None:
    crawler, handler = _crawler()
    await crawler.run()
    assert [r.url for r in handler.requests] == ["http://site.test/a"]
    assert crawler.state is SpiderState.FINISHED
    with capture_logs() as logs, pytest.raises(InvalidTransition, match="cannot pause while"):
        crawler.pause()
    assert {"event": "crawl_move_refused", "spider": "pages", "state": "finished",
            "action": "pause", "log_level": "warning"} in logs  # fmt: skip
    assert crawler.state is SpiderState.FINISHED


async def test_a_crawl_whose_opening_is_cancelled_ends_stopped_not_failed() -> None:
    crawler, handler = _crawler()
    gate = asyncio.Event()

    async def never_opens() -> None:  # an engine's stop cancels the task that opens it
        await gate.wait()

    crawler.frontier.open = never_opens  # type: ignore[method-assign]
    starting = asyncio.create_task(crawler.start())
    await eventually(lambda: crawler.state is SpiderState.STARTING, "starting")
    starting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await starting
    assert crawler.state is SpiderState.STOPPED
    assert await asyncio.wait_for(crawler.wait(), 30) is SpiderState.STOPPED
    assert handler.requests == []
