"""``netdisco demo`` as a newcomer runs it: a subprocess, its output and exit code, no leftovers."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.reaper import alive as running

pytestmark = pytest.mark.zookeeper  # the demo starts its own ZooKeeper

ENGINES = ("engine-1", "engine-2", "engine-3")


def demo_command(out: Path) -> list[str]:
    return [sys.executable, "-m", "netdisco.cli", "demo", "--out", str(out)]


def clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("NETDISCO_")}


def announced_pids(output: str) -> set[int]:
    """Every pid the demo told the user about (ZooKeeper, monitor, engines)."""
    return {int(pid) for pid in re.findall(r"\bpid (\d+)", output)}


def assert_nothing_left(output: str) -> None:
    pids = announced_pids(output)
    assert len(pids) >= 5, output  # ZooKeeper, the monitor and three engines
    deadline = time.monotonic() + 10
    while (left := [p for p in pids if running(p)]) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not left, f"still running after the demo exited: {left}\n{output}"


@pytest.mark.timeout(150)
@pytest.mark.slow
def test_demo_shows_join_leave_loss_and_the_email(tmp_path: Path) -> None:
    result = subprocess.run(
        demo_command(tmp_path / "out"),
        capture_output=True,
        text=True,
        timeout=120,
        env=clean_env(),
        check=False,
    )
    out = result.stdout
    assert result.returncode == 0, out + result.stderr
    assert result.stderr == ""  # child logs go to files, not to the terminal
    for engine in ENGINES:
        assert re.search(rf"event engine_joined\s+{engine}\b", out), out
    assert re.search(r"event engine_left\s+engine-1\b", out), out
    assert re.search(r"engine-1\s+exited with code 0", out), out
    assert re.search(r"event engine_lost\s+engine-2\b", out), out
    assert "| Subject: [netdisco] engine_lost: engine-2" in out, out
    assert "| To: ops@demo.invalid" in out
    rates = re.findall(r"engine-\d\s+\d+ \(\s*([\d.]+)/s\)", out)
    assert rates, out
    assert any(float(rate) > 0 for rate in rates), out
    assert out.index("engine_left") < out.index("engine_lost") < out.index("Subject:")
    assert_nothing_left(out)
    for spider in ("shop", "blog", "docs"):
        assert (tmp_path / "out" / "items" / f"{spider}.jsonl").read_text().count("\n") > 0
    for name in (*ENGINES, "monitor"):
        assert (tmp_path / "out" / "logs" / f"{name}.log").stat().st_size > 0


def read_until(process: subprocess.Popen[str], marker: str, timeout: float = 60.0) -> str:
    """The demo's output up to and including the first line containing ``marker``."""
    assert process.stdout is not None
    seen: list[str] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            break
        seen.append(line)
        if marker in line:
            return "".join(seen)
    raise AssertionError(f"no {marker!r} in the demo's output:\n{''.join(seen)}")


@pytest.mark.timeout(90)
@pytest.mark.slow
def test_ctrl_c_mid_crawl_stops_everything(tmp_path: Path) -> None:
    """SIGINT to the demo's process group, as a terminal's Ctrl-C sends it, while engines crawl."""
    process = subprocess.Popen(
        demo_command(tmp_path / "out"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=clean_env(),
        start_new_session=True,
    )
    try:
        before = read_until(process, "progress      engine-1")
        os.killpg(process.pid, signal.SIGINT)
        rest, errors = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    out = before + rest
    assert process.returncode == 128 + signal.SIGINT, out + errors
    assert "SIGINT: stopping everything it started" in out
    assert "engine_lost" not in out  # it stopped before the crash it would have staged
    assert_nothing_left(out)


@pytest.mark.timeout(150)
@pytest.mark.slow
def test_keep_serves_the_cluster_until_ctrl_c(tmp_path: Path) -> None:
    """``--keep``: after the story the dashboard and the mail view still answer; SIGINT
    then stops everything, with exit status 0."""
    process = subprocess.Popen(
        [*demo_command(tmp_path / "out"), "--keep"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=clean_env(),
        start_new_session=True,
    )
    try:
        before = read_until(process, "dashboard http://", timeout=100)
        found = re.search(r"dashboard (http://\S+), mails (http://\S+)", before)
        assert found, before
        # the story is over and what it started still serves (that the demo did not go
        # on to stop it by itself is checked below, in the order of its last lines)
        with urllib.request.urlopen(found[1], timeout=10) as response:
            assert response.status == 200
        with urllib.request.urlopen(found[2] + "mails.json", timeout=10) as response:
            mails = json.loads(response.read())
        assert any("engine_lost: engine-2" in mail["Subject"] for mail in mails), mails
        assert process.poll() is None, "the demo ended without being stopped"
        os.killpg(process.pid, signal.SIGINT)
        rest, errors = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    out = before + rest
    assert process.returncode == 0, out + errors
    assert "SIGINT: stopping everything it started" in rest
    # it kept everything until the SIGINT: it stopped nothing before being told to
    assert rest.index("SIGINT: stopping everything") < rest.index("(SIGTERM, by pid)"), out
    assert_nothing_left(out)
