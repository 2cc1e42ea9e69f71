"""A command job's process (``python -m netdisco.engine.jobcommand SPEC``): a project's
declared command, run as its job.

The engine starts this module as it starts :mod:`netdisco.engine.jobchild` (the same
spec file, status lines on stdout, the log on stderr, SIGTERM to stop, the engine's
death seen on stdin and by the parent-death signal), so a command job is placed,
cancelled, lost and ended as every job is (:mod:`netdisco.engine.jobs`). Here the
command runs in the installed version's ``src/`` with its venv first on ``PATH``, in
a process group of its own: its stdout and stderr become the job's log, line by line,
and the items it writes as JSON lines to ``$NETDISCO_ITEMS`` (a FIFO, so nothing
unbounded lands on the disk) are kept as a spider's are (:class:`KeptItems`); a line
that is not a JSON object is counted (``items_bad``) and the first few are said in the
log. A stop is SIGTERM to the group, SIGKILL ``stop_deadline`` later; what the command
leaves running when it exits is killed with it; its exit status is the job's.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import json
import os
import shutil
import signal
import sys
from collections import deque
from pathlib import Path
from typing import Any

import structlog

from netdisco._tasks import Tasks
from netdisco.cluster.commands import program_path
from netdisco.engine.jobchild import REFUSED, _emit, _orphaned, _watch_stdin, main
from netdisco.engine.jobitems import ITEMS_FILE, KeptItems
from netdisco.engine.joblog import CHUNK, MAX_LINE
from netdisco.engine.jobs import batches
from netdisco.exceptions import ConfigError

log = structlog.get_logger(__name__)

#: the FIFO in the job's directory that ``$NETDISCO_ITEMS`` names
ITEMS_FIFO = "items.fifo"
#: replaced by the FIFO's path in the command's arguments (no shell expands it):
#: ``["scrapy", "crawl", "quotes", "-O", "$NETDISCO_ITEMS:jsonlines"]``
ITEMS_VARIABLE = "$NETDISCO_ITEMS"
#: refused item lines said in the log one by one (the rest are counted)
SAID_BAD = 10
#: seconds the output left in the pipes is read after the command exited
AFTER_EXIT = 2.0


def resolve_program(argv: list[str], cwd: Path, path: str) -> list[str]:
    """The argv to exec: a project file by its absolute path (inside ``cwd``, executable),
    a program name as found on ``path``; ``ConfigError`` saying why not otherwise."""
    program = program_path(argv[0])
    if program is None:
        found = shutil.which(argv[0], path=path)
        if found is None:
            raise ConfigError("command", f"{argv[0]!r} is not found on the job's PATH")
        return [found, *argv[1:]]
    root = cwd.resolve()
    target = root.joinpath(*program.parts).resolve()
    if not target.is_relative_to(root) or not target.is_file():
        raise ConfigError("command", f"{argv[0]!r} is not a file of the project")
    if not os.access(target, os.X_OK):
        raise ConfigError("command", f"{argv[0]!r} is not executable")
    return [str(target), *argv[1:]]


def command_env(spec: dict[str, Any], fifo: Path) -> dict[str, str]:
    """The command's environment: the engine's (less its ``NETDISCO_`` variables), the
    venv first on ``PATH``, where to write items, and the job's id."""
    venv = spec["command"]["venv"]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONHOME"}
    env.update(
        PATH=f"{venv}/bin{os.pathsep}{env.get('PATH', os.defpath)}",
        VIRTUAL_ENV=venv,
        PYTHONUNBUFFERED="1",
        NETDISCO_ITEMS=str(fifo),
        NETDISCO_JOB=str(spec["job"]["id"]),
    )
    return env


def _constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


class CommandItems:
    """The items a command writes to the FIFO: a JSON object a line, kept (bounded);
    any other line counted as bad, never held whole when over :data:`MAX_LINE`."""

    def __init__(self, path: Path, kept: KeptItems) -> None:
        self.path = path
        self.kept = kept
        self.good = 0
        self.bad = 0
        self.lines = 0
        self._pending = b""
        self._skipping = False  # inside a line refused for its length
        self._fd: int | None = None

    def open(self) -> None:
        """Make the FIFO and read it as the loop can: opened for reading and writing, so
        it never blocks and sees no end while the command has it closed."""
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
        os.mkfifo(self.path, 0o600)
        self._fd = os.open(self.path, os.O_RDWR | os.O_NONBLOCK)
        asyncio.get_running_loop().add_reader(self._fd, self.drain)

    def drain(self) -> None:
        """Read what is waiting in the FIFO."""
        while self._fd is not None:
            try:
                chunk = os.read(self._fd, CHUNK)
            except BlockingIOError:
                return
            if not chunk:
                return
            self._feed(chunk)

    def _feed(self, chunk: bytes) -> None:
        *whole, rest = (self._pending + chunk).split(b"\n")
        for line in whole:
            if self._skipping:
                self._skipping = False  # the end of a line refused for its length
            else:
                self._line(line)
        if len(rest) > MAX_LINE:
            if not self._skipping:
                self.lines += 1
                self._refuse(f"longer than {MAX_LINE} bytes", rest)
            self._skipping = True
            rest = b""
        self._pending = rest

    def _line(self, raw: bytes) -> None:
        if not raw.strip():
            return
        self.lines += 1
        if len(raw) > MAX_LINE:
            self._refuse(f"longer than {MAX_LINE} bytes", raw)
            return
        try:
            text = raw.decode("utf-8").strip()
            item = json.loads(text, parse_constant=_constant)
        except (ValueError, RecursionError):
            item = None
        if not isinstance(item, dict):
            self._refuse("not a JSON object", raw)
            return
        self.good += 1
        self.kept.process_line(text + "\n")

    def _refuse(self, reason: str, raw: bytes) -> None:
        self.bad += 1
        if self.bad <= SAID_BAD:
            start = raw[:80].decode("utf-8", "replace")
            log.warning("item_line_refused", line=self.lines, reason=reason, start=start)

    def close(self) -> None:
        """Read what is left (a last line without its newline too), close, remove the FIFO."""
        if self._fd is None:
            return
        asyncio.get_running_loop().remove_reader(self._fd)
        self.drain()
        if self._pending and not self._skipping:
            self._line(self._pending)
        self._pending = b""
        os.close(self._fd)
        self._fd = None
        with contextlib.suppress(OSError):
            self.path.unlink()

    def counts(self) -> dict[str, int]:
        """What the job's status line reports of its items."""
        return {"items": self.good, **self.kept.counts(), "items_bad": self.bad}


def _die_with_us() -> None:
    """In the command, before its exec: SIGKILL it when this process dies, even by SIGKILL."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def _signal_group(group: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(group, signum)


async def _kill_after(group: int, seconds: float) -> None:
    await asyncio.sleep(seconds)
    log.warning("command_killed", after=seconds)
    _signal_group(group, signal.SIGKILL)


async def _copy(reader: asyncio.StreamReader | None, last: deque[bytes]) -> None:
    """One of the command's output pipes into the job's log, line by line."""
    assert reader is not None
    async for batch in batches(reader):
        for line in batch:
            text = line.rstrip(b"\r")
            sys.stderr.write(text.decode("utf-8", "replace") + "\n")
            if text.strip():
                last.append(text)
        sys.stderr.flush()


def _ending(code: int, last: deque[bytes]) -> tuple[int, str | None]:
    """The exit status to report (a signal as a shell says it, 128 + its number) and the
    job's error: what ended the command, and the last line it wrote."""
    if code == 0:
        return 0, None
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        said = f"the command was killed by {name}"
    else:
        said = f"the command exited with status {code}"
    if last:
        said += f"; its last line: {last[-1][:300].decode('utf-8', 'replace')}"
    return (128 - code if code < 0 else min(code, 255)), said


async def _supervise(
    spec: dict[str, Any], argv: list[str], env: dict[str, str], items: CommandItems
) -> tuple[int, str | None]:
    """Run the command to its end, stopped on SIGTERM or the engine's end; its exit
    status and the job's error. Whatever it left running is killed when it ends (or
    at once, should this process fail)."""
    stop = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(signum, stop.set)
    tasks, last = Tasks(), deque[bytes](maxlen=1)
    tasks.spawn(_watch_stdin(stop))
    pipe = asyncio.subprocess.PIPE
    proc = await asyncio.create_subprocess_exec(
        *argv, cwd=spec["command"]["cwd"], env=env, stdin=asyncio.subprocess.DEVNULL,
        stdout=pipe, stderr=pipe, process_group=0, preexec_fn=_die_with_us,
    )  # fmt: skip
    log.info("command_started", job=spec["job"]["id"], argv=argv, pid=proc.pid)
    copies = [tasks.spawn(_copy(proc.stdout, last)), tasks.spawn(_copy(proc.stderr, last))]
    try:
        code = await _watch(spec, proc, items, stop, tasks)
    finally:
        _signal_group(proc.pid, signal.SIGKILL)
    await asyncio.wait(copies, timeout=AFTER_EXIT)
    await tasks.cancel_all(timeout=0.1)
    log.info("command_exited", job=spec["job"]["id"], status=code)
    return _ending(code, last)


async def _watch(
    spec: dict[str, Any],
    proc: asyncio.subprocess.Process,
    items: CommandItems,
    stop: asyncio.Event,
    tasks: Tasks,
) -> int:
    """Until the command exits, its items flushed and a status line every half second;
    on ``stop``, SIGTERM to its group, then SIGKILL ``stop_deadline`` later."""
    parent = os.getppid()
    exited, stopping = tasks.spawn(proc.wait()), tasks.spawn(stop.wait())
    while not exited.done():
        await items.kept.flush()  # what it wrote so far can be read through the items routes
        _emit({"state": "running", **items.counts(), "final": False})
        waited = {exited} if stopping.done() else {exited, stopping}
        await asyncio.wait(waited, timeout=0.5, return_when=asyncio.FIRST_COMPLETED)
        if stopping.done() and waited != {exited}:
            _orphaned(parent)
            log.info("job_stopping", job=spec["job"]["id"])
            _signal_group(proc.pid, signal.SIGTERM)
            tasks.spawn(_kill_after(proc.pid, float(spec.get("stop_deadline", 10.0))))
    return exited.result()


async def run(spec: dict[str, Any]) -> int:
    """Run the job's command to its end; its exit status (2 when it was refused)."""
    directory = Path(spec["directory"])
    kept = KeptItems(directory / ITEMS_FILE, int(spec.get("items_max", 0)))
    items = CommandItems(directory / ITEMS_FIFO, kept)
    try:
        env = command_env(spec, items.path)
        cwd = Path(spec["command"]["cwd"])
        said = [arg.replace(ITEMS_VARIABLE, str(items.path)) for arg in spec["command"]["argv"]]
        argv = resolve_program(said, cwd, env["PATH"])
    except ConfigError as exc:  # said in the job's log too, where `jobs log` reads
        log.error("job_refused", job=spec["job"]["id"], reason=str(exc))
        _emit({"state": "failed", "error": str(exc), "final": True})
        return REFUSED
    await kept.open()
    items.open()
    try:
        code, error = await _supervise(spec, argv, env, items)
    except OSError as exc:  # exec failed: a bad interpreter line, say
        code, error = REFUSED, f"the command could not start: {exc}"
        log.error("job_refused", job=spec["job"]["id"], reason=error)
    finally:
        items.close()
        await kept.close()
    state = "finished" if code == 0 else "failed"
    _emit({"state": state, **items.counts(), "error": error, "final": True})
    return code


if __name__ == "__main__":
    sys.exit(main(job=run))
