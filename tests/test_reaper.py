"""Nothing outlives a test run (tests/reaper.py, the hooks in tests/conftest.py): a run of
pytest in a subprocess whose test leaks a process, or whose worker crashes, in a session
of its own as the servers are started; the process is gone when that run ends."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from netdisco.testing import wait_for
from tests import reaper

ROOT = Path(__file__).resolve().parent.parent

LEAKING_TEST = """
import os, subprocess, sys
from pathlib import Path

def test_leaks() -> None:
    child = subprocess.Popen(["sleep", "300"], start_new_session=True)
    Path({pidfile!r}).write_text(str(child.pid))
    if {crash!r}:
        os._exit(1)  # the worker dies as pytest-timeout ends it
"""


def run_leaking(tmp_path: Path, *, crash: bool, workers: int) -> tuple[int, str, int]:
    """An inner run whose one test starts ``sleep 300`` and leaves it: exit, output, pid."""
    pidfile = tmp_path / "pid"
    (tmp_path / "test_leak.py").write_text(LEAKING_TEST.format(pidfile=str(pidfile), crash=crash))
    env = {k: v for k, v in os.environ.items() if k not in (reaper.MARK, "PYTEST_XDIST_WORKER")}
    xdist = ["-n", str(workers), "--max-worker-restart", "0"] if workers else []
    argv = [sys.executable, "-m", "pytest", "-p", "tests.conftest", "-q", "-p", "no:randomly"]
    argv += [*xdist, "-p", "no:cacheprovider", "--rootdir", str(tmp_path), str(tmp_path)]
    done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    return done.returncode, done.stdout + done.stderr, int(pidfile.read_text())


@pytest.mark.parametrize("workers", [0, 1])
def test_a_process_a_test_leaks_is_stopped_and_fails_the_run(tmp_path: Path, workers: int):
    code, output, pid = run_leaking(tmp_path, crash=False, workers=workers)
    assert code == 1, output
    assert f"pid {pid}: sleep 300" in output
    assert "a test leaked them" in output
    assert not reaper.alive(pid)


def test_what_a_crashed_worker_started_goes_with_it(tmp_path: Path) -> None:
    code, output, pid = run_leaking(tmp_path, crash=True, workers=1)
    assert code != 0, output
    assert f"pid {pid}: sleep 300" in output
    assert "gw0's crash" in output
    assert not reaper.alive(pid)


def test_the_reaper_finds_only_its_own_run() -> None:
    env = {**os.environ, reaper.MARK: "another-run"}
    other = subprocess.Popen(["sleep", "300"], env=env, start_new_session=True)
    try:
        # until it has exec'd, a child's /proc environ is still its parent's
        ran = lambda: other.pid in {left.pid for left in reaper.marked("another-run")} or None  # noqa: E731
        wait_for("the other run's process, marked", ran, 10)
        assert other.pid not in {left.pid for left in reaper.marked("a-third-run")}
        assert reaper.main(["another-run"]) == 1  # make test's check after pytest: a failure
        other.wait(10)  # stopped by it
        assert reaper.main(["another-run"]) == 0  # nothing left now
        assert reaper.main([]) == 2
    finally:
        other.kill()
        other.wait(10)
