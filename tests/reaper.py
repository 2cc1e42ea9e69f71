"""What a test run started, found again and stopped, however the run or a worker ended.

Every process a test starts (servers of ``netdisco.testing``, engines, CLIs, their
children) inherits ``NDTEST_RUN=<run id>`` from the run's environment; ``/proc`` tells
each process's environment, so what a crashed worker or a killed run left behind is
found by that mark alone, even in a new session of its own (ZooKeeper, redis-server).

``python -m tests.reaper RUN_ID``: stops what carries the mark and exits 1 if anything
did (``make test`` runs it after pytest: a suite that leaves a process behind fails).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from dataclasses import dataclass
from pathlib import Path

from netdisco.testing import wait_for

#: the environment variable every process of one test run carries
MARK = "NDTEST_RUN"


@dataclass(frozen=True)
class Leftover:
    pid: int
    command: str


def _environ(pid: int) -> dict[str, str]:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:  # gone, or not ours to read
        return {}
    pairs = (entry.partition(b"=") for entry in raw.split(b"\0") if entry)
    return {k.decode(errors="replace"): v.decode(errors="replace") for k, _, v in pairs}


def _command(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return "?"
    return raw.replace(b"\0", b" ").decode(errors="replace").strip()[:200]


def _stat(pid: int) -> list[str]:
    """The fields of ``/proc/PID/stat`` after the command: state, parent, ..."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return []


def _ours() -> set[int]:
    """This process, its parents and, in xdist's controller, its workers: they carry the
    mark, and they are the run itself, not what it left behind."""
    me = os.getpid()
    pids, pid = {me}, me
    while pid > 1 and (fields := _stat(pid)):
        pid = int(fields[1])
        pids.add(pid)
    if "PYTEST_XDIST_WORKER" in os.environ:  # a worker's children are what its tests made
        return pids
    for entry in Path("/proc").iterdir():
        pid = int(entry.name) if entry.name.isdigit() else 0
        fields = _stat(pid) if pid else []
        if fields and int(fields[1]) == me and "PYTEST_XDIST_WORKER" in _environ(pid):
            pids.add(pid)
    return pids


def alive(pid: int) -> bool:
    """Alive and not a zombie (a reparented zombie holds nothing: it is gone)."""
    fields = _stat(pid)
    return bool(fields) and fields[0] != "Z"


def marked(run: str, worker: str | None = None) -> list[Leftover]:
    """The live processes of run ``run`` (of one xdist ``worker`` only, if given), this
    process and its ancestors aside. Zombies are not counted: they run nothing."""
    found = []
    ours = _ours()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or (pid := int(entry.name)) in ours:
            continue
        env = _environ(pid)
        if env.get(MARK) != run:
            continue
        if worker is not None and env.get("PYTEST_XDIST_WORKER") != worker:
            continue
        if _stat(pid)[:1] == ["Z"]:
            continue
        found.append(Leftover(pid, _command(pid)))
    return found


def reap(run: str, worker: str | None = None, grace: float = 5.0) -> list[Leftover]:
    """Stop the processes ``marked`` (SIGTERM, SIGKILL after ``grace`` s): what was found."""
    found = marked(run, worker)
    for leftover in found:
        with contextlib.suppress(ProcessLookupError):
            os.kill(leftover.pid, signal.SIGTERM)
    with contextlib.suppress(TimeoutError):
        wait_for("the run's processes gone", lambda: None if marked(run, worker) else True, grace)
    for leftover in marked(run, worker):
        with contextlib.suppress(ProcessLookupError):
            os.kill(leftover.pid, signal.SIGKILL)
    return found


def main(argv: list[str]) -> int:
    if len(argv) != 1 or not argv[0]:
        print("usage: python -m tests.reaper RUN_ID", file=sys.stderr)
        return 2
    found = reap(argv[0])
    for leftover in found:
        print(f"left behind by the test run: pid {leftover.pid}: {leftover.command}")
    if found:
        print(f"{len(found)} process(es) outlived the test run; stopped now", file=sys.stderr)
        return 1
    print("nothing left behind by the test run")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
