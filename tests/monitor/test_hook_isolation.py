"""A hook that hangs or forks cannot hurt the monitor: no orphans, no starved threads.

Real ZooKeeper, real fake engines, a real SMTP server, real child processes; what
is asserted is what is left afterwards (processes by group, deliveries, a close
that returns), never how long anything took.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from monitor.hooks import HOOK_THREADS, CallableHook, kill_schedule
from netdisco.testing import eventually
from tests.monitor.conftest import monitor_config
from tests.monitor.test_alerts import _email, _lose, _value

#: writes its pid (its process group) to argv[1], forks children that ignore TERM, hangs
FORKER = """
import os, signal, subprocess, sys, time
with open(sys.argv[1], "a") as out:
    out.write(f"{os.getpgid(0)}\\n")
ignore = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(3600)"
for _ in range(3):
    subprocess.Popen([sys.executable, "-c", ignore])
time.sleep(3600)
"""


def group_members(pgid: int) -> list[int]:
    """Live (not zombie) processes in process group ``pgid``, read from /proc."""
    members = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat.rpartition(")")[2].split()
        if int(fields[2]) == pgid and fields[0] != "Z":
            members.append(int(entry))
    return members


@pytest.fixture
def groups(tmp_path: Path) -> Iterator[Path]:
    """The file the forker writes its groups to; any group still alive is killed after."""
    path = tmp_path / "groups"
    yield path
    for pgid in _groups(path):
        if group_members(pgid):
            os.killpg(pgid, signal.SIGKILL)


def _groups(path: Path) -> list[int]:
    return [int(line) for line in path.read_text().split()] if path.exists() else []


async def test_a_command_that_forks_and_hangs_leaves_no_process_behind(
    zk_hosts: str, start_monitor: Any, engines: Any, groups: Path
) -> None:
    command = {"argv": [sys.executable, "-c", FORKER, str(groups)], "timeout": 30.0}
    config = monitor_config(zk_hosts, command=command, alerts={"hook_timeout": 2.0})
    monitor, rec = await start_monitor(config)
    await _lose(engines, rec, "f1")
    # several attempts timed out (and were retried), and at least two had forked before
    # their timeout (under load an interpreter may start too late to): each group must go
    await eventually(
        lambda: (
            _value(monitor, "netdisco_monitor_alerts_failed_total", "command") >= 2
            and len(_groups(groups)) >= 2
        )
    )
    await monitor.close()  # cancels the attempt in flight: its group goes too
    assert len(_groups(groups)) >= 2
    leftovers = {pgid: group_members(pgid) for pgid in _groups(groups)}
    assert leftovers == {pgid: [] for pgid in leftovers}


async def test_a_hung_sync_hook_starves_nobody_and_shutdown_completes(
    zk_hosts: str, start_monitor: Any, engines: Any, smtp: Any
) -> None:
    config = monitor_config(
        zk_hosts,
        email=_email(smtp),
        callable={"target": "tests.monitor.hook_targets:hangs_forever"},
        alerts={"hook_timeout": 0.2, "retry_initial": 0.05, "retry_max": 0.05},
    )
    monitor, rec = await start_monitor(config)
    hook = next(h for h in monitor.alerts.hooks if isinstance(h, CallableHook))
    await _lose(engines, rec, "s1")
    # more hung attempts than the loop's default executor has threads
    await eventually(
        lambda: _value(monitor, "netdisco_monitor_alerts_failed_total", "callable") >= 12
    )
    assert hook.threads.busy == HOOK_THREADS  # bounded: the hung calls keep their threads
    await _lose(engines, rec, "s2")  # the e-mail hook and the watcher go on
    await eventually(lambda: len(smtp.mailbox.messages) == 2, "both e-mails")
    await asyncio.wait_for(asyncio.to_thread(lambda: "free"), 10)  # the default pool is free
    await asyncio.wait_for(monitor.close(), 30)  # outcome: it returns (the ZooKeeper stop ran)


@pytest.mark.parametrize(
    ("timeout", "outer"), [(10.0, 10.0), (1.0, 10.0), (30.0, 0.5), (0.1, 0.2), (5.0, None)]
)
def test_the_kill_schedule_ends_before_the_outer_timeout(
    timeout: float, outer: float | None
) -> None:
    term_at, grace = kill_schedule(timeout, outer)
    assert 0 < term_at <= timeout
    assert grace > 0
    if outer is not None:
        assert term_at + grace < outer
