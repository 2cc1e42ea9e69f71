"""The engine's own lifecycle: ``created -> running -> stopping -> stopped``, once.

An engine object runs once; a restarted engine is a new object with a new
incarnation (``netdisco.cluster.contract``), which is how the cluster tells a
restart from a continuation.
"""

from __future__ import annotations

import enum


class EngineState(enum.StrEnum):
    """The engine's own lifecycle: it runs once, then it is done."""

    CREATED = "created"
    RUNNING = "running"
    STOPPING = "stopping"
    STOPPED = "stopped"
