"""The hang witness names the threads, the pending tasks and the children's stacks."""

from __future__ import annotations

import asyncio
import sys
import threading
from pathlib import Path

import pytest

from netdisco.testing import wait_for
from tests import hangs

CHILD = """
import sys, time
def napping_in_the_child():
    print("napping", flush=True)
    time.sleep(120)
napping_in_the_child()
"""


async def _stuck_in_a_coroutine(gate: asyncio.Event) -> None:
    await gate.wait()


async def _waiting_on_a_helper(gate: asyncio.Event) -> None:
    await _stuck_in_a_coroutine(gate)


async def test_the_witness_shows_threads_tasks_and_children(tmp_path: Path) -> None:
    out = tmp_path / "witness.txt"
    gate = asyncio.Event()
    task = asyncio.create_task(_waiting_on_a_helper(gate))
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-c", CHILD, stdout=asyncio.subprocess.PIPE
    )
    try:
        assert child.stdout is not None
        assert await child.stdout.readline() == b"napping\n"  # in its function before the dump
        await asyncio.sleep(0)  # the task has started and waits
        with out.open("w") as handle:
            # from another thread, as the timer does, while this loop runs
            await asyncio.to_thread(hangs.witness, handle.fileno(), "tests/x.py::test_y")
    finally:
        child.kill()
        await child.wait()
        gate.set()
        await task
    text = out.read_text()
    assert "hang witness: tests/x.py::test_y" in text
    assert "Thread 0x" in text or "Current thread" in text  # faulthandler's threads
    chain = text[text.index("_waiting_on_a_helper") :]  # the pending task, down its awaits
    assert "in _stuck_in_a_coroutine" in chain
    assert "in wait" in chain
    assert "awaits FutureIter" in chain
    assert f"child {child.pid}:" in text
    assert "napping_in_the_child" in text  # py-spy's dump of the child
    assert text.rstrip().endswith("end of the hang witness for tests/x.py::test_y")


def test_the_witness_speaks_ahead_of_the_timeout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "witness.txt"
    monkeypatch.setattr(hangs, "AHEAD", hangs.SHORTEST + 0.9)  # so: 0.1 s after arming
    with out.open("w") as handle:
        watch = hangs.Watch(handle.fileno(), "tests/x.py::test_soon", hangs.SHORTEST + 1)
        try:
            ended = lambda: "end of the hang witness" in out.read_text() or None  # noqa: E731
            wait_for("the witness", ended, 30)
        finally:
            watch.disarm()
    assert "hang witness: tests/x.py::test_soon" in out.read_text()


def test_a_disarmed_or_short_watch_says_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "witness.txt"
    monkeypatch.setattr(hangs, "AHEAD", hangs.SHORTEST - 1)  # would speak 2 s after arming
    own = {t for t in threading.enumerate() if t.name == "hang-witness"}  # this test's watch
    with out.open("w") as handle:
        short = hangs.Watch(handle.fileno(), "tests/x.py::test_short", hangs.SHORTEST)
        watch = hangs.Watch(handle.fileno(), "tests/x.py::test_ended", hangs.SHORTEST + 1)
        timers = [t for t in threading.enumerate() if t.name == "hang-witness" and t not in own]
        watch.disarm()
        short.disarm()
        for timer in timers:
            timer.join(timeout=30)
    assert len(timers) == 1  # the short test's watch never armed
    assert not timers[0].is_alive()
    assert out.read_text() == ""


LOOPING_CHILD = """
import asyncio, sys
from tests.taskdump import install

async def parked_in_the_child(started, gate):
    started.set()
    await gate.wait()

async def main():
    install()
    started, gate = asyncio.Event(), asyncio.Event()
    task = asyncio.create_task(parked_in_the_child(started, gate))
    await started.wait()
    print("parked", flush=True)
    await task

asyncio.run(main())
"""


async def test_the_witness_shows_a_childs_pending_tasks(tmp_path: Path) -> None:
    """A child crawl whose loop idles in select shows only select to py-spy: its tasks
    (asked for with SIGUSR1) say what it waits on."""
    out = tmp_path / "witness.txt"
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-c", LOOPING_CHILD, stdout=asyncio.subprocess.PIPE
    )
    try:
        assert child.stdout is not None
        assert await child.stdout.readline() == b"parked\n"
        with out.open("w") as handle:
            await asyncio.to_thread(hangs.witness, handle.fileno(), "tests/x.py::test_z")
        assert child.returncode is None  # SIGUSR1 asked, it did not end the child
    finally:
        child.kill()
        await child.wait()
    text = out.read_text()
    tasks = text[text.index(f"child {child.pid}'s") :]
    assert "pending asyncio task(s)" in tasks
    assert "in parked_in_the_child" in tasks
    assert "in wait" in tasks
