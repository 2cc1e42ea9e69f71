"""The hang witness: what a test was doing shortly before its timeout ends it.

pytest-timeout's thread method dumps the worker's threads and kills the worker, which is
too late and too little for a crawl: the threads of an asyncio test all wait in
``select``, and the tasks that do not end, and the processes the test started, are not
shown. So, ``AHEAD`` seconds before a test's timeout, the witness writes to the worker's
real stderr (which the run's log keeps): every thread's stack, every pending asyncio
task's stack, and ``py-spy dump`` of every process the worker started.
"""

from __future__ import annotations

import asyncio
import contextlib
import faulthandler
import gc
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import psutil

#: how long before the timeout the witness speaks
AHEAD = 15.0
#: a test whose timeout is shorter gets no witness (it would speak while all is well)
SHORTEST = 30.0


def _pending_tasks() -> list[asyncio.Task[object]]:
    """Every task not done in any loop of this process (read from another thread)."""
    for _ in range(5):  # the set may change while it is copied
        with contextlib.suppress(RuntimeError):
            tasks = list(asyncio.tasks._all_tasks)  # type: ignore[attr-defined]
            break
    else:
        tasks = [obj for obj in gc.get_objects() if isinstance(obj, asyncio.Task)]
    return [task for task in tasks if not task.done()]


def _await_chain(task: asyncio.Task[object]) -> list[str]:
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


def _py_spy() -> str | None:
    beside = Path(sys.executable).with_name("py-spy")
    return str(beside) if beside.exists() else shutil.which("py-spy")


def witness(fd: int, nodeid: str) -> None:
    """Write what this process and its descendants are doing to ``fd``."""
    out = os.fdopen(os.dup(fd), "w", buffering=1)
    with out:
        out.write(f"\n!!! hang witness: {nodeid} is {AHEAD:g} s from its timeout\n")
        out.flush()
        faulthandler.dump_traceback(file=out, all_threads=True)
        tasks = _pending_tasks()
        out.write(f"\n!!! {len(tasks)} pending asyncio task(s):\n")
        for task in tasks:
            with contextlib.suppress(Exception):  # a task may end while it is printed
                out.write(f"{task!r}\n{''.join(_await_chain(task))}")
        spy = _py_spy()
        for child in psutil.Process().children(recursive=True):
            with contextlib.suppress(psutil.Error):
                out.write(f"\n!!! child {child.pid}: {' '.join(child.cmdline())[:300]}\n")
            if spy is None or not _is_python(child):
                continue
            out.flush()
            with contextlib.suppress(OSError, subprocess.SubprocessError):
                subprocess.run(  # our own venv's py-spy on our own child
                    [spy, "dump", "--pid", str(child.pid)],
                    stdout=out, stderr=subprocess.STDOUT, timeout=10, check=False,
                )  # fmt: skip
        out.write(f"!!! end of the hang witness for {nodeid}\n")


def _is_python(process: psutil.Process) -> bool:
    with contextlib.suppress(psutil.Error):
        return "python" in Path(process.exe()).name
    return False


class Watch:
    """One test's witness, armed while it runs."""

    def __init__(self, fd: int, nodeid: str, timeout: float) -> None:
        self._timer: threading.Timer | None = None
        if timeout > SHORTEST:
            self._timer = threading.Timer(timeout - AHEAD, witness, args=(fd, nodeid))
            self._timer.daemon = True
            self._timer.name = "hang-witness"
            self._timer.start()

    def disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
