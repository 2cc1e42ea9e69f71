"""``netdisco dev up|down|status`` as a user runs it: CLI subprocesses, real servers on
loopback, and every pid they start stopped again, by pid, even when a check fails."""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import signal
import smtplib
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from email.message import EmailMessage
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from netdisco import dev
from netdisco.testing import ZooKeeperServer, free_port, redis_ping
from tests.reaper import alive as running

pytestmark = [pytest.mark.zookeeper, pytest.mark.redis]


def cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NETDISCO_")}
    argv = [sys.executable, "-m", "netdisco.cli", *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env)


def free_base() -> int:
    """A port whose next four are free too (dev up takes five in a row). Drawn below the
    ephemeral range: there, a busy suite's closed client connections (TIME_WAIT) leave
    few runs of five (a CI run found none in 100 draws)."""
    low, _ = (int(n) for n in Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    draw = random.Random()
    for _ in range(200):
        base = draw.randrange(10_000, max(10_001, low - len(dev.OFFSETS)))
        with contextlib.ExitStack() as stack:
            try:
                for port in range(base, base + len(dev.OFFSETS)):
                    sock = stack.enter_context(socket.socket())
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                    sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return base
    raise RuntimeError("no five free ports in a row")


def kill_recorded(state_dir: Path) -> None:
    """Cleanup whatever happened: SIGKILL every recorded pid that is still the one recorded."""
    with contextlib.suppress(Exception):
        for service in dev.load_state(state_dir):
            if dev.is_ours(service):
                os.kill(service.pid, signal.SIGKILL)


@pytest.fixture
def state_dir(tmp_path: Path) -> Iterator[Path]:
    directory = tmp_path / "dev"
    try:
        yield directory
    finally:
        kill_recorded(directory)


def get(url: str) -> tuple[int, str]:
    with urllib.request.urlopen(url, timeout=10) as response:
        return response.status, response.read().decode()


@pytest.mark.timeout(240)
@pytest.mark.slow
def test_up_serves_everything_then_down_stops_exactly_it(state_dir: Path, tmp_path: Path) -> None:
    base = free_base()
    started = cli("dev", "up", "--dir", str(state_dir), "--port-base", str(base))
    assert started.returncode == 0, started.stdout + started.stderr
    out = started.stdout
    services = dev.load_state(state_dir)
    assert [s.name for s in services] == ["zookeeper", "redis", "smtp-sink", "monitor"]
    assert all(running(s.pid) for s in services)
    zk, redis, smtp, mails, monitor = (base + dev.OFFSETS[n] for n in dev.OFFSETS)
    assert f"127.0.0.1:{zk}" in out, out
    assert f"http://127.0.0.1:{monitor}/" in out, out

    again = cli("dev", "up", "--dir", str(state_dir), "--port-base", str(base))
    assert again.returncode == 1, again.stdout + again.stderr
    assert "already up" in again.stdout, again.stdout + again.stderr
    assert dev.load_state(state_dir) == services  # the second up started nothing
    shown = cli("dev", "status", "--dir", str(state_dir))
    assert shown.returncode == 0, shown.stdout
    assert "4 of 4 running" in shown.stdout, shown.stdout

    client = KazooClient(hosts=f"127.0.0.1:{zk}", timeout=10)
    client.start(timeout=15)
    try:
        assert "netdiscovery" in client.get_children("/")  # the monitor made its root
    finally:
        client.stop()
        client.close()
    assert redis_ping("127.0.0.1", redis)

    message = EmailMessage()
    message["From"], message["To"] = "me@dev.invalid", "you@dev.invalid"
    message["Subject"] = "caught by dev up <3"
    message.set_content("hello from the test")
    with smtplib.SMTP("127.0.0.1", smtp, timeout=10) as client_smtp:
        client_smtp.send_message(message)
    code, page = get(f"http://127.0.0.1:{mails}/")
    assert code == 200, page
    assert "caught by dev up &lt;3" in page, page
    _, listing = get(f"http://127.0.0.1:{mails}/mails.json")
    assert json.loads(listing)[0]["Subject"] == "caught by dev up <3"
    code, dashboard = get(f"http://127.0.0.1:{monitor}/")
    assert code == 200
    assert "<html" in dashboard.lower()

    # the printed engine.toml lines, as printed, run an engine that joins this cluster
    lines = out.split("lines for your engine.toml:", 1)[1].strip()
    engine_port = free_port()
    config = tmp_path / "engine.toml"
    config.write_text(f'[engine]\nid = "dev-engine"\nport = {engine_port}\n\n{lines}\n')
    readme = (Path(dev.__file__).resolve().parents[1] / "README.md").read_text("utf-8")
    catalogue = re.search(r"^# catalogue\.py\n(.*?)^```", readme, re.M | re.S)
    assert catalogue, "the README's catalogue.py"  # the spider the printed lines name
    (tmp_path / "catalogue.py").write_text(catalogue.group(1))
    env = {k: v for k, v in os.environ.items() if not k.startswith("NETDISCO_")}
    with (tmp_path / "engine.log").open("wb") as log:
        engine = subprocess.Popen(
            [sys.executable, "-m", "netdisco.cli", "--log-json", "engine", "--config", str(config)],
            stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True, cwd=tmp_path,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        seen: list[str] = []
        while time.monotonic() < deadline and "dev-engine" not in seen:
            assert engine.poll() is None, (tmp_path / "engine.log").read_text()
            with contextlib.suppress(OSError, ValueError):
                view = json.loads(get(f"http://127.0.0.1:{monitor}/netdiscovery/monitor")[1])
                seen = [e.get("id") for e in view.get("engines", [])]
            time.sleep(0.2)
        assert "dev-engine" in seen, (tmp_path / "engine.log").read_text()
    finally:
        engine.send_signal(signal.SIGTERM)
        try:
            engine.wait(20)
        except subprocess.TimeoutExpired:
            engine.kill()
            engine.wait(5)

    stopped = cli("dev", "down", "--dir", str(state_dir))
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    deadline = time.monotonic() + 10
    while (left := [s.pid for s in services if running(s.pid)]) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not left, stopped.stdout
    assert not (state_dir / "state.json").exists()
    after = cli("dev", "status", "--dir", str(state_dir))
    assert after.returncode == 1
    assert "nothing is up" in after.stdout


@pytest.mark.timeout(180)
def test_down_leaves_a_pid_that_is_no_longer_the_recorded_process(tmp_path: Path) -> None:
    """A pid reused by another program (another start time or command line) is not signalled."""
    other = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        started = dev._stat_started(other.pid)
        assert started is not None
        state_dir = tmp_path / "dev"
        state_dir.mkdir()
        records = [
            dev.Service("redis", other.pid, started, "127.0.0.1:1", "x", "x"),  # other command
            dev.Service("monitor", other.pid, started + 1, "sleep", "x", "x"),  # other start
        ]
        (state_dir / "state.json").write_text(
            json.dumps({"services": [r.__dict__ for r in records]})
        )
        result = cli("dev", "down", "--dir", str(state_dir), timeout=30)
        assert result.returncode == 0, result.stdout + result.stderr
        assert result.stdout.count("was not running") == 2, result.stdout
        assert other.poll() is None  # still running: never signalled
    finally:
        other.kill()
        other.wait(5)


@pytest.mark.timeout(180)
def test_a_taken_port_or_a_bad_state_file_is_a_clear_error(tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        taken = int(sock.getsockname()[1])
        result = cli("dev", "up", "--dir", str(tmp_path / "a"), "--port-base", str(taken))
    assert result.returncode == 2, result.stdout + result.stderr
    assert re.search(rf"127\.0\.0\.1:{taken} \(for zookeeper\) is taken", result.stderr)
    assert not (tmp_path / "a" / "state.json").exists()
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "state.json").write_text('{"services": [{"name": "x", "pid": -1}]}')
    result = cli("dev", "down", "--dir", str(tmp_path / "b"), timeout=30)
    assert result.returncode == 2, result.stderr
    assert "not a state file" in result.stderr, result.stderr


def time_wait_on(port: int) -> None:
    """Leave a closed connection in TIME_WAIT on ``port``'s listening side, as a server
    that ``dev down`` stopped does (the side that closes first keeps it)."""
    with socket.socket() as server:
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind(("127.0.0.1", port))
        server.listen()
        client = socket.create_connection(("127.0.0.1", port))
        accepted, _ = server.accept()
        accepted.close()  # the server closes first: its side waits out TIME_WAIT
        client.recv(1)
        client.close()


def test_ports_just_freed_by_a_stopped_server_are_free(tmp_path: Path) -> None:
    """``dev up`` right after ``dev down``: a port in TIME_WAIT is no port taken."""
    base = free_base()
    time_wait_on(base)
    with socket.socket() as probe, pytest.raises(OSError, match="in use"):
        probe.bind(("127.0.0.1", base))  # the kernel does keep it: a plain bind is refused
    assert dev._check_ports(base)["zookeeper"] == base


@pytest.mark.timeout(120)
def test_a_failed_up_stops_what_it_had_started(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The monitor failing to start: ZooKeeper, Redis and the sink are stopped again."""
    spawned: list[int] = []
    real_spawn = dev._spawn

    def spawn(argv: list[str], log: Path) -> subprocess.Popen[bytes]:
        process = real_spawn(argv, log)
        spawned.append(process.pid)
        return process

    def no_monitor(*args: object) -> dev.Service:
        raise RuntimeError("the monitor did not start (staged)")

    started: list[int] = []
    real_start = ZooKeeperServer.start

    def start_zk(self: ZooKeeperServer, timeout: float = 30.0) -> None:
        real_start(self, timeout)
        assert self.process is not None
        started.append(self.process.pid)

    monkeypatch.setattr(dev, "_spawn", spawn)
    monkeypatch.setattr(dev, "_start_monitor", no_monitor)
    monkeypatch.setattr(ZooKeeperServer, "start", start_zk)
    with pytest.raises(RuntimeError, match="staged"):
        dev.up(state_dir, free_base())
    assert len(spawned) == 1  # the sink
    assert len(started) == 1  # ZooKeeper
    assert not [pid for pid in [*spawned, *started] if running(pid)]
    assert not (state_dir / "state.json").exists()


def test_up_without_the_demo_extra_says_what_to_install_and_starts_nothing(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without aiosmtpd (the ``[demo]`` extra), one line naming it, not a traceback."""
    monkeypatch.setitem(sys.modules, "aiosmtpd", None)  # as if not installed
    assert dev.up(state_dir, free_base()) == 2
    said = capsys.readouterr()
    assert "pip install 'netdiscovery[demo]'" in said.err
    assert "Traceback" not in said.err + said.out
    assert dev.load_state(state_dir) == []  # nothing started
