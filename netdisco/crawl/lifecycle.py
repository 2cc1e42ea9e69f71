"""A spider's lifecycle: its states, which action each allows, and what a push returns.

``idle -> running <-> paused -> stopping -> stopped``; a crawl that drains its
frontier (or its ``max_pages``) ends ``finished``, one that cannot start or
crashes ``failed``. The engine and the HTTP API read these names.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field


class SpiderState(enum.StrEnum):
    """Where a spider is in its life (``docs/architecture.md``, one crawl)."""

    IDLE = "idle"
    RUNNING = "running"
    PAUSED = "paused"
    STOPPING = "stopping"
    STOPPED = "stopped"
    FINISHED = "finished"
    FAILED = "failed"


TERMINAL = frozenset({SpiderState.STOPPED, SpiderState.FINISHED, SpiderState.FAILED})
#: action -> states it is allowed from
ALLOWED = {
    "start": {SpiderState.IDLE},
    "pause": {SpiderState.RUNNING},
    "resume": {SpiderState.PAUSED},
    "stop": {SpiderState.RUNNING, SpiderState.PAUSED},
    "push": {SpiderState.IDLE, SpiderState.RUNNING, SpiderState.PAUSED},
    "retry": {SpiderState.RUNNING, SpiderState.PAUSED},  # failed requests queued again
}


@dataclass
class PushResult:
    """What became of URLs pushed into a spider."""

    accepted: list[str] = field(default_factory=list)
    rejected: list[tuple[str, str]] = field(default_factory=list)
