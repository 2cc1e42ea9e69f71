"""A command job's process (``netdisco.engine.jobcommand``) run as its engine runs it: a
spec file, status lines on its stdout, its log on its stderr, its stdin held open. What a
hostile or broken command writes is counted and bounded; a command that leaves the
project or is not there is refused; a stop reaches its whole process group."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import pytest

from netdisco.engine.jobcommand import SAID_BAD
from netdisco.engine.joblog import CHUNK, MAX_LINE
from netdisco.testing import eventually


def gone(pid: int) -> bool:
    """Whether a process has ended (a zombie nobody reaped yet counts as ended)."""
    try:
        os.kill(pid, 0)
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (ProcessLookupError, FileNotFoundError):
        return True
    return stat.rpartition(")")[2].split()[0] == "Z"


class Child:
    """One command job's process in ``tmp_path``: ``src/`` holds ``script`` as crawl.sh."""

    def __init__(self, tmp_path: Path, script: str, **spec: Any) -> None:
        self.src = tmp_path / "src"
        self.src.mkdir()
        self.job = tmp_path / "job"
        (self.src / "crawl.sh").write_text("#!/bin/sh\n" + script)
        (self.src / "crawl.sh").chmod(0o755)
        self.spec: dict[str, Any] = {
            "job": {"id": "0123456789ab", "settings": {}},
            "directory": str(self.job),
            "items_max": 100,
            "stop_deadline": 1.0,
            "command": {"argv": ["./crawl.sh"], "cwd": str(self.src), "venv": sys.prefix},
        } | spec
        self.proc: asyncio.subprocess.Process | None = None

    async def start(self) -> asyncio.subprocess.Process:
        path = self.job.parent / "spec.json"
        path.write_text(json.dumps(self.spec))
        pipe = asyncio.subprocess.PIPE
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "netdisco.engine.jobcommand", str(path),
            stdin=pipe, stdout=pipe, stderr=pipe, start_new_session=True,
        )  # fmt: skip
        return self.proc

    async def end(self) -> tuple[int, dict[str, Any], str]:
        """Its exit status, its last status line and its log."""
        proc = self.proc or await self.start()
        out, err = await asyncio.wait_for(proc.communicate(), 60)
        last = json.loads(out.splitlines()[-1])
        assert proc.returncode is not None
        return proc.returncode, last, err.decode()

    def items(self) -> list[str]:
        return (self.job / "items.jsonl").read_text().splitlines()


async def test_bad_item_lines_are_counted_and_the_good_kept_up_to_the_bound(tmp_path):
    long_line = "x" * (MAX_LINE + 10)
    longer = "y" * (3 * CHUNK)  # read in several pieces, never held whole
    bad = ["not json", "[1, 2]", '"a string"', '{"n": NaN}', "{broken", long_line, longer]
    bad += ["nope"] * SAID_BAD
    lines = ['{"n": 1}', "", *bad, '  {"n": 2, "s": "é"}  ', '{"n": 3}']
    script = "".join(f"printf '%s\\n' '{line}' >> \"$NETDISCO_ITEMS\"\n" for line in lines)
    script += "printf '\\377\\376 not utf-8\\n' >> \"$NETDISCO_ITEMS\"\n"
    script += 'printf \'{"n": 4}\' >> "$NETDISCO_ITEMS"\necho done\n'  # no newline at its end
    child = Child(tmp_path, script, items_max=3)
    code, status, log = await child.end()
    assert (code, status["state"], status["final"]) == (0, "finished", True)
    assert status["items"] == 4
    assert (status["items_kept"], status["items_dropped"]) == (3, 1)
    assert status["items_bad"] == len(bad) + 1  # and the line that is not UTF-8
    assert child.items() == ['{"n": 1}', '{"n": 2, "s": "é"}', '{"n": 3}']
    assert log.count('"item_line_refused"') == SAID_BAD  # the rest are only counted
    assert log.count(f"longer than {MAX_LINE} bytes") == 2
    assert len(log) < 20_000  # the long line is not in the log
    assert "done" in log.splitlines()
    assert not (child.job / "items.fifo").exists()


async def test_the_exit_status_decides_and_a_signal_is_said_as_a_shell_says_it(tmp_path):
    child = Child(tmp_path, 'echo "last words" >&2\nkill -KILL $$\n')
    code, status, _ = await child.end()
    assert code == 128 + signal.SIGKILL
    assert status["state"] == "failed"
    assert status["error"] == "the command was killed by SIGKILL; its last line: last words"


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["./link.sh"], "'./link.sh' is not a file of the project"),
        (["./data.txt"], "'./data.txt' is not executable"),
        (["./missing.sh"], "'./missing.sh' is not a file of the project"),
        (["no-such-program-here"], "'no-such-program-here' is not found on the job's PATH"),
        (["../crawl.sh"], "is outside the project"),
    ],
)
async def test_a_program_outside_the_project_or_absent_is_refused(tmp_path, argv, said):
    outside = tmp_path / "outside.sh"
    outside.write_text("#!/bin/sh\necho escaped\n")
    outside.chmod(0o755)
    child = Child(tmp_path, "echo ran\n")
    (child.src / "link.sh").symlink_to(outside)  # the archive has none: the check holds anyway
    (child.src / "data.txt").write_text("#!/bin/sh\necho ran\n")
    child.spec["command"]["argv"] = argv
    code, status, log = await child.end()
    assert code == 2
    assert said in status["error"]
    assert '"job_refused"' in log
    assert "escaped" not in log
    assert "ran" not in log.splitlines()


async def test_a_stop_reaches_the_group_and_sigkill_follows_the_deadline(tmp_path):
    script = (
        "trap 'echo ignoring TERM' TERM\n"
        "sleep 1000 &\necho $! > sleeper\n"
        "touch started\n"
        "while true; do sleep 0.05; done\n"
    )
    child = Child(tmp_path, script, stop_deadline=0.5)
    await child.start()
    await eventually(lambda: (child.src / "started").exists(), "the command started", timeout=30)
    sleeper = int((child.src / "sleeper").read_text())
    assert child.proc is not None
    child.proc.send_signal(signal.SIGTERM)
    code, _, log = await child.end()
    assert "ignoring TERM" in log
    assert '"command_killed"' in log
    assert code == 128 + signal.SIGKILL
    await eventually(lambda: gone(sleeper), "its background process ended too", timeout=10)


async def test_the_engine_gone_stops_the_command(tmp_path):
    script = "sleep 1000 &\necho $! > sleeper\ntouch started\nwait\n"
    child = Child(tmp_path, script)
    proc = await child.start()
    await eventually(lambda: (child.src / "started").exists(), "the command started", timeout=30)
    sleeper = int((child.src / "sleeper").read_text())
    assert proc.stdin is not None
    proc.stdin.close()  # what the engine's death looks like from here
    await asyncio.wait_for(proc.wait(), 30)
    await eventually(lambda: gone(sleeper), "the command ended", timeout=10)


async def test_the_items_variable_in_an_argument_is_the_fifos_path(tmp_path):
    script = 'printf \'{"to": "%s"}\\n\' "$1" > "${1%:jsonlines}"\n'  # as scrapy -O PATH:FORMAT
    child = Child(tmp_path, script)
    child.spec["command"]["argv"] = ["./crawl.sh", "$NETDISCO_ITEMS:jsonlines"]
    code, status, _ = await child.end()
    assert (code, status["items_kept"]) == (0, 1)
    assert child.items() == [json.dumps({"to": f"{child.job / 'items.fifo'}:jsonlines"})]
