"""A crawl's lifecycle: its states, the one table of its moves, and the one owner of both.

``MOVES`` is the whole lifecycle (docs/architecture.md draws it): the moves a crawl may
make from each state, which of them a user asks for (the engine, its HTTP API, a signal)
and which the crawl makes itself. ``Phase`` holds a crawl's state and makes every move
through the table; a move the table does not allow is refused, logged with both states,
and raised as ``InvalidTransition``. The engine, the HTTP API, the monitor and a
``-j`` crawl read the same names.
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import structlog

from netdisco.exceptions import InvalidTransition

log = structlog.get_logger(__name__)


class SpiderState(enum.StrEnum):
    """Where a crawl is in its life."""

    IDLE = "idle"
    STARTING = "starting"
    RUNNING = "running"
    PAUSED = "paused"
    STOPPING = "stopping"
    STOPPED = "stopped"
    FINISHED = "finished"
    FAILED = "failed"


TERMINAL = frozenset({SpiderState.STOPPED, SpiderState.FINISHED, SpiderState.FAILED})

_S = SpiderState
#: (state, action) -> the state the action moves a crawl to. The user's actions are
#: ``start``, ``pause``, ``resume`` and ``stop``; the crawl makes the others:
#: ``opened`` once its frontier, feeds and browser are ready; ``finish`` when its frontier
#: is drained or its ``max_pages`` reached (or, from ``starting``, when a stored crawl had
#: finished before); ``stopped`` once a stop has closed everything; ``fail`` when it
#: cannot open or cannot go on (a frontier that gave up, a pipeline's flush that failed, a
#: spider whose ``start()`` raised).
MOVES: Mapping[tuple[SpiderState, str], SpiderState] = {
    (_S.IDLE, "start"): _S.STARTING,
    (_S.STARTING, "opened"): _S.RUNNING,
    (_S.STARTING, "stop"): _S.STOPPING,  # a stop while opening: closed once opened
    (_S.STARTING, "finish"): _S.FINISHED,
    (_S.STARTING, "fail"): _S.FAILED,
    (_S.RUNNING, "pause"): _S.PAUSED,
    (_S.RUNNING, "stop"): _S.STOPPING,
    (_S.RUNNING, "finish"): _S.FINISHED,
    (_S.RUNNING, "fail"): _S.FAILED,
    (_S.PAUSED, "resume"): _S.RUNNING,
    (_S.PAUSED, "stop"): _S.STOPPING,
    (_S.PAUSED, "fail"): _S.FAILED,
    (_S.STOPPING, "stopped"): _S.STOPPED,
    (_S.STOPPING, "fail"): _S.FAILED,
}
#: actions that change no state, and the states they are allowed in
STAYS: Mapping[str, frozenset[SpiderState]] = {
    "push": frozenset({_S.IDLE, _S.STARTING, _S.RUNNING, _S.PAUSED}),
    "retry": frozenset({_S.RUNNING, _S.PAUSED}),  # failed requests queued again
}
#: how a crawl that ends in a state got there (the action ``Phase.end`` makes)
ENDINGS: Mapping[SpiderState, str] = {
    _S.FINISHED: "finish",
    _S.STOPPED: "stopped",
    _S.FAILED: "fail",
}


def allows(state: SpiderState, action: str) -> bool:
    """Whether a crawl in ``state`` may take ``action`` (pure: the table's answer)."""
    return (state, action) in MOVES or state in STAYS.get(action, ())


class Phase:
    """One crawl's state, moved only through ``MOVES``; ``listener`` hears every move.

    Also what the crawl's workers wait on: ``dispatching`` is set unless the crawl is
    paused, and ``stopping`` says that a stop was asked for.
    """

    def __init__(self, spider: str, listener: Callable[[], None] = lambda: None) -> None:
        self.spider = spider
        self.state = SpiderState.IDLE
        self._listener = listener
        self._dispatching = asyncio.Event()
        self._dispatching.set()
        self._ended = asyncio.Event()
        self.stopping = False  # a stop was asked: set on the move, kept until the end

    def check(self, action: str) -> None:
        """Refuse ``action`` unless the table allows it now (logged, then raised)."""
        if not allows(self.state, action):
            log.warning("crawl_move_refused", spider=self.spider, state=self.state.value,
                        action=action)  # fmt: skip
            raise InvalidTransition(self.spider, self.state.value, action)

    def move(self, action: str) -> SpiderState:
        """Make ``action``'s move, or refuse it; the new state."""
        self.check(action)
        to = MOVES.get((self.state, action))
        if to is None:  # an action that changes no state (push, retry)
            return self.state
        self.state = to
        self.stopping |= to is SpiderState.STOPPING
        if to is SpiderState.PAUSED:
            self._dispatching.clear()
        else:
            self._dispatching.set()
        if to in TERMINAL:
            self._ended.set()
        self._listener()
        return to

    def end(self, state: SpiderState) -> SpiderState:
        """Enter the terminal ``state`` by the move that leads there."""
        return self.move(ENDINGS[state])

    @property
    def paused(self) -> bool:
        return not self._dispatching.is_set()

    async def unpaused(self) -> None:
        """Return once the crawl may dispatch (at once unless it is paused)."""
        await self._dispatching.wait()

    async def ended(self) -> None:
        """Return once the crawl is in a terminal state."""
        await self._ended.wait()


@dataclass
class PushResult:
    """What became of URLs pushed into a spider."""

    accepted: list[str] = field(default_factory=list)
    rejected: list[tuple[str, str]] = field(default_factory=list)
