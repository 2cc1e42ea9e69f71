"""The hang witness: what a test was doing shortly before its timeout ends it.

pytest-timeout's thread method dumps the worker's threads and kills the worker, which is
too late and too little for a crawl: the threads of an asyncio test all wait in
``select``, and the tasks that do not end, and the processes the test started, are not
shown. So, ``AHEAD`` seconds before a test's timeout, the witness writes to the worker's
real stderr (which the run's log keeps): every thread's stack, every pending asyncio
task's stack, and ``py-spy dump`` of every process the worker started, with the pending
tasks of those that handle SIGUSR1 (``tests.taskdump``; py-spy shows a child's threads,
which in a crawl all wait in ``select``, not its tasks).
"""

from __future__ import annotations

import contextlib
import faulthandler
import os
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path

import psutil

from netdisco.testing import wait_for
from tests.taskdump import TASK_DUMP, await_chain, pending_tasks

#: how long before the timeout the witness speaks
AHEAD = 15.0
#: a test whose timeout is shorter gets no witness (it would speak while all is well)
SHORTEST = 30.0


def _catches_task_dump(process: psutil.Process) -> bool:
    """Whether ``process`` handles SIGUSR1 (its SigCgt mask): the default would end it."""
    with contextlib.suppress(OSError, ValueError):
        for line in Path(f"/proc/{process.pid}/status").read_text().splitlines():
            if line.startswith("SigCgt:"):
                return bool(int(line.split()[1], 16) >> (signal.SIGUSR1 - 1) & 1)
    return False


def _child_tasks(process: psutil.Process) -> str:
    """The pending tasks a child wrote on our SIGUSR1 (within 3 s), or why not."""
    path = Path(TASK_DUMP.format(pid=process.pid))
    path.unlink(missing_ok=True)
    try:
        process.send_signal(signal.SIGUSR1)
    except psutil.Error as exc:
        return f"(no task dump: {exc!r})\n"
    try:
        text: str = wait_for("the task dump", lambda: path.read_text() if path.exists() else None,
                        3.0, every=0.05)  # fmt: skip
    except TimeoutError:
        return "(no task dump within 3 s: its main thread is blocked)\n"
    path.unlink(missing_ok=True)
    return text


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
        tasks = pending_tasks()
        out.write(f"\n!!! {len(tasks)} pending asyncio task(s):\n")
        for task in tasks:
            with contextlib.suppress(Exception):  # a task may end while it is printed
                out.write(f"{task!r}\n{''.join(await_chain(task))}")
        spy = _py_spy()
        for child in psutil.Process().children(recursive=True):
            with contextlib.suppress(psutil.Error):
                out.write(f"\n!!! child {child.pid}: {' '.join(child.cmdline())[:300]}\n")
            if not _is_python(child):
                continue
            if _catches_task_dump(child):
                out.write(f"!!! child {child.pid}'s {_child_tasks(child)}")
            if spy is None:
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
