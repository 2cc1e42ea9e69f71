"""A process's pending asyncio tasks, written on SIGUSR1, for the hang witness (tests/hangs.py).

Standard library only: every Python process of a suite's run imports it at start (the
venv's ``netdisco-taskdump.pth``, when ``NDTEST_RUN`` is set), the CLI's crawls and
``-j`` workers included, so that a child that does not end can say what it waits on
(py-spy shows its threads, which in a crawl all wait in ``select``).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import signal
import tempfile
import threading
from pathlib import Path
from types import FrameType

#: where a process writes its tasks on SIGUSR1
TASK_DUMP = str(Path(tempfile.gettempdir()) / "netdisco-tasks-{pid}.txt")


def install() -> None:
    """On SIGUSR1, write this process's pending tasks to ``TASK_DUMP`` (the handler runs on
    the main thread, between the loop's own steps)."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGUSR1, _dump)


def _dump(signum: int, frame: FrameType | None) -> None:
    tasks = pending_tasks()
    text = "".join(f"{task!r}\n{''.join(await_chain(task))}" for task in tasks)
    path = Path(TASK_DUMP.format(pid=os.getpid()))
    path.with_suffix(".part").write_text(f"{len(tasks)} pending asyncio task(s):\n{text}")
    path.with_suffix(".part").replace(path)  # whole, or not there


def pending_tasks() -> list[asyncio.Task[object]]:
    """Every task not done in any loop of this process (read from another thread)."""
    for _ in range(5):  # the set may change while it is copied
        with contextlib.suppress(RuntimeError):
            tasks = list(asyncio.tasks._all_tasks)  # type: ignore[attr-defined]
            break
    else:
        tasks = [obj for obj in gc.get_objects() if isinstance(obj, asyncio.Task)]
    return [task for task in tasks if not task.done()]


def await_chain(task: asyncio.Task[object]) -> list[str]:
    """Where the task waits, outermost first, down every coroutine it awaits (a task's
    own stack shows only its outermost frame)."""
    lines: list[str] = []
    awaited: object = task.get_coro()
    while awaited is not None and len(lines) < 40:
        frame = getattr(awaited, "cr_frame", None) or getattr(awaited, "ag_frame", None)
        frame = frame or getattr(awaited, "gi_frame", None)
        if frame is None:  # a future (its __await__ iterator), or a coroutine that ended
            lines.append(f"    awaits {type(awaited).__name__}\n")
            break
        code = frame.f_code
        lines.append(f'  File "{code.co_filename}", line {frame.f_lineno}, in {code.co_name}\n')
        awaited = (
            getattr(awaited, "cr_await", None)
            or getattr(awaited, "ag_await", None)
            or getattr(awaited, "gi_yieldfrom", None)
        )
    return lines


if os.environ.get("NDTEST_RUN"):
    install()
