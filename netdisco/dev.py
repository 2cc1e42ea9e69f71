"""``netdisco dev up|down|status``: a standing cluster on the laptop, on loopback.

``up`` starts Debian's ZooKeeper and ``redis-server`` (``netdisco._servers``, as the
tests and the demo run them), the demo's SMTP sink with its web view (``netdisco dev
sink``) and the monitor (alerting to the sink), each in its own session so that they
outlive the command, on fixed ports from ``--port-base``. It prints their addresses and
the lines an engine's TOML file needs, and writes ``state.json`` under ``--dir`` (data,
logs and configs are kept there too). ``down`` stops what that file names, by pid, and
only a pid whose start time and command line are still those it recorded (a pid reused
since by another program is left alone). ``status`` says what still runs.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from netdisco._servers import RedisServer, ZooKeeperServer
from netdisco.demo.site import serve_sink
from netdisco.demo.story import monitor_toml
from netdisco.demo.support import entry_point
from netdisco.exceptions import ConfigError

DEFAULT_DIR = ".netdisco-dev"
#: ZooKeeper, Redis, SMTP, the mail view, the monitor: base + 0 .. 4 (8316, the monitor's
#: own default, and 8715, the engine's, stay free for a monitor or engines of your own)
DEFAULT_PORT_BASE = 8320
#: where ``--port-base`` comes from when it is not given
PORT_BASE_ENV = "NETDISCO_DEV_PORT_BASE"
OFFSETS = {"zookeeper": 0, "redis": 1, "smtp": 2, "mails": 3, "monitor": 4}
HOST = "127.0.0.1"
START_TIMEOUT = 60.0
STOP_TIMEOUT = 10.0
STATE_MAX_BYTES = 64 * 1024


@dataclass(frozen=True)
class Service:
    """One process ``up`` started: how to find it again, and how to tell it is still it."""

    name: str
    pid: int
    started: int  # the process's start time, in clock ticks after boot (/proc/PID/stat)
    marker: str  # a string its command line holds (redis-server rewrites its own)
    address: str
    log: str


def add_parser(commands: Any, common: argparse.ArgumentParser) -> None:
    dev = commands.add_parser(
        "dev",
        parents=[common],
        help="a standing local cluster: ZooKeeper, Redis, an SMTP sink, the monitor",
        description="up: start ZooKeeper, Redis, an SMTP sink with a web view of its mails "
        "and the monitor on 127.0.0.1 (ports --port-base .. +4), print their addresses and "
        "the engine.toml lines; down: stop them by pid; status: what runs. State, data and "
        "logs are kept under --dir.",
    )
    actions = dev.add_subparsers(dest="action", required=True)
    for action, text in (("up", "start the cluster"), ("down", "stop what up started"),
                         ("status", "what runs (exit 1 unless all of it)")):  # fmt: skip
        sub = actions.add_parser(action, help=text, parents=[common])
        sub.add_argument("--dir", default=DEFAULT_DIR, help=f"state directory ({DEFAULT_DIR})")
        if action == "up":
            sub.add_argument(
                "--port-base",
                type=int,
                default=os.environ.get(PORT_BASE_ENV, str(DEFAULT_PORT_BASE)),
                help=f"ZooKeeper's port; Redis, SMTP, the mail view and the monitor take the "
                f"next four (${PORT_BASE_ENV}, else {DEFAULT_PORT_BASE})",
            )
    sink = actions.add_parser("sink", help="(run by up) the SMTP sink and its web view")
    sink.add_argument("--smtp-port", type=int, required=True)
    sink.add_argument("--web-port", type=int, required=True)
    sink.add_argument("--dir", default=DEFAULT_DIR, help="the state directory it belongs to")
    dev.set_defaults(func=run)


async def run(args: argparse.Namespace) -> int:
    if args.action == "sink":
        return await serve_sink(args.smtp_port, args.web_port, HOST)
    return await asyncio.to_thread(_run, args.action, args.dir, getattr(args, "port_base", 0))


def _run(action: str, directory: str, port_base: int) -> int:
    """``up``, ``down`` and ``status`` block (processes, files): a thread runs them."""
    state_dir = Path(directory).resolve()
    if action == "up":
        return up(state_dir, port_base)
    return down(state_dir) if action == "down" else status(state_dir)


# ---- pids, checked before they are signalled


def _stat_started(pid: int) -> int | None:
    """The start time of ``pid`` (None if gone or a zombie)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    fields = stat.rsplit(")", 1)[1].split()
    return None if fields[0] == "Z" else int(fields[19])


def _cmdline(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
        return raw.replace(b"\0", b" ").decode(errors="replace")
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return ""


def is_ours(service: Service) -> bool:
    """The recorded pid still runs the process ``up`` started (same start, same command)."""
    return _stat_started(service.pid) == service.started and service.marker in _cmdline(service.pid)


def _record(name: str, pid: int, marker: str, address: str, log: Path) -> Service:
    started = _stat_started(pid)
    if started is None:
        raise RuntimeError(f"{name} (pid {pid}) exited at once; see {log}")
    return Service(name, pid, started, marker, address, str(log))


def _terminate(service: Service) -> bool:
    """SIGTERM (SIGKILL after ``STOP_TIMEOUT``) if still ours; True when it is gone."""
    if not is_ours(service):
        return True
    os.kill(service.pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_TIMEOUT
    while is_ours(service):
        if time.monotonic() > deadline:
            os.kill(service.pid, signal.SIGKILL)
            deadline = time.monotonic() + 5.0
        time.sleep(0.05)
    return True


# ---- the state file


def _state_file(state_dir: Path) -> Path:
    return state_dir / "state.json"


def load_state(state_dir: Path) -> list[Service]:
    """The services ``up`` recorded; [] when there is no state file."""
    path = _state_file(state_dir)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    if len(data) > STATE_MAX_BYTES:
        raise ConfigError(str(path), f"is over {STATE_MAX_BYTES} bytes; not a state file of ours")
    try:
        raw = json.loads(data)
        return [_service(entry) for entry in raw["services"]]
    except (ValueError, KeyError, TypeError) as exc:
        raise ConfigError(str(path), f"is not a state file of `netdisco dev up`: {exc}") from None


def _service(entry: Any) -> Service:
    if not isinstance(entry, dict):
        raise TypeError("a service is not an object")
    service = Service(**entry)
    for key in ("pid", "started"):
        value = getattr(service, key)
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise ValueError(f"{key} {value!r} is not a positive integer")
    for key in ("name", "marker", "address", "log"):
        if not isinstance(getattr(service, key), str) or not getattr(service, key):
            raise ValueError(f"{key} is not a non-empty string")
    return service


def _save_state(state_dir: Path, services: list[Service]) -> None:
    tmp = _state_file(state_dir).with_suffix(".tmp")
    tmp.write_text(json.dumps({"services": [asdict(s) for s in services]}, indent=2) + "\n")
    tmp.replace(_state_file(state_dir))


# ---- up


def _check_ports(base: int) -> dict[str, int]:
    if not 1024 <= base <= 65535 - len(OFFSETS):
        raise ConfigError("--port-base", f"must be 1024 to {65535 - len(OFFSETS)}, got {base}")
    ports = {name: base + offset for name, offset in OFFSETS.items()}
    for name, port in ports.items():
        with socket.socket() as sock:
            # as every server here binds: a port whose last connection is in TIME_WAIT
            # (just after ``dev down``) is free to listen on again
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind((HOST, port))
            except OSError:
                raise ConfigError(
                    "--port-base", f"{HOST}:{port} (for {name}) is taken; pick another base"
                ) from None
    return ports


def _wait_http(url: str, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{url} exited with code {process.returncode}; see {log}")
        with (
            contextlib.suppress(urllib.error.URLError, OSError),
            urllib.request.urlopen(url, timeout=2.0) as response,
        ):
            if response.status == 200:
                return
        time.sleep(0.1)
    raise TimeoutError(f"{url} did not answer within {START_TIMEOUT:.0f} s; see {log}")


def _spawn(argv: list[str], log: Path) -> subprocess.Popen[bytes]:
    """A child in its own session, so that it outlives ``up`` and the terminal's Ctrl-C."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("NETDISCO_")}
    with log.open("ab") as handle:
        return subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=handle, stderr=subprocess.STDOUT,
            env=env, start_new_session=True,
        )  # fmt: skip


def _stop_child(child: subprocess.Popen[bytes]) -> None:
    if child.poll() is None:
        child.terminate()
        try:
            child.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait(5)


#: what ``up`` says when the SMTP sink cannot run (exit 2, nothing started)
NEEDS_DEMO = (
    "netdisco dev up: the SMTP sink needs aiosmtpd, which comes with the demo extra: "
    "pip install 'netdiscovery[demo]' (in a checkout: pip install -e '.[demo]', or make demo)"
)


def up(state_dir: Path, base: int) -> int:
    """Start everything or nothing: what started before a failure is stopped again."""
    try:
        import aiosmtpd  # noqa: F401 - the sink's, asked before anything starts
    except ImportError:
        print(NEEDS_DEMO, file=sys.stderr)
        return 2
    running = [s for s in load_state(state_dir) if is_ours(s)]
    if running:
        print(f"netdisco dev: already up under {state_dir} (`netdisco dev down` stops it)")
        _print_services(running)
        return 1
    ports = _check_ports(base)
    services = _start_all(state_dir, ports)
    _save_state(state_dir, services)
    print(f"netdisco dev: up, state under {state_dir} (`netdisco dev down` stops it)")
    _print_services(services)
    print("\nlines for your engine.toml:\n")
    print(engine_lines(ports))
    return 0


def _start_all(state_dir: Path, ports: dict[str, int]) -> list[Service]:
    """ZooKeeper, Redis, the sink, the monitor; on a failure, what started is stopped."""
    logs = state_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    services: list[Service] = []
    zk, redis = ZooKeeperServer(state_dir / "zookeeper"), RedisServer(state_dir / "redis")
    children: list[subprocess.Popen[bytes]] = []  # the sink and the monitor, once spawned
    try:
        servers = (
            (zk, "zookeeper", f"{HOST}:{ports['zookeeper']}"),
            (redis, "redis", f"redis://{HOST}:{ports['redis']}/0"),
        )
        for server, name, address in servers:
            server.port = ports[name]
            server.start(START_TIMEOUT)
            assert server.process is not None
            # ZooKeeper's command line names its zoo.cfg; redis-server's process title
            # (it rewrites its command line) is "redis-server 127.0.0.1:PORT"
            marker = str(zk.data_dir / "zoo.cfg") if server is zk else f"{HOST}:{redis.port}"
            log = server.data_dir / "server.log"
            services.append(_record(name, server.process.pid, marker, address, log))
        services.append(_start_sink(state_dir, ports, logs / "sink.log", children))
        services.append(_start_monitor(state_dir, ports, logs / "monitor.log", children))
    except BaseException:  # our own children still: stopped through their Popen, by pid
        for child in reversed(children):
            _stop_child(child)
        redis.stop()
        zk.stop()
        raise
    return services


def _start_sink(
    state_dir: Path, ports: dict[str, int], log: Path, children: list[subprocess.Popen[bytes]]
) -> Service:
    argv = [*entry_point("netdisco", "netdisco.cli"), "dev", "sink", "--dir", str(state_dir),
            "--smtp-port", str(ports["smtp"]), "--web-port", str(ports["mails"])]  # fmt: skip
    process = _spawn(argv, log)
    children.append(process)
    url = f"http://{HOST}:{ports['mails']}/"
    _wait_http(url, process, log)
    address = f"{HOST}:{ports['smtp']}, mails at {url}"
    return _record("smtp-sink", process.pid, f"--dir {state_dir} ", address, log)


def _start_monitor(
    state_dir: Path, ports: dict[str, int], log: Path, children: list[subprocess.Popen[bytes]]
) -> Service:
    config = state_dir / "monitor.toml"
    zk_hosts = f"{HOST}:{ports['zookeeper']}"
    text = monitor_toml(zk_hosts, ports["monitor"], ports["smtp"])
    text = text.replace("`netdisco demo`", "`netdisco dev up`")
    # control (pause, jobs, deploys) from loopback: the monitor listens on nothing else
    config.write_text(text + "\n[control]\n")
    argv = [*entry_point("netdisco-monitor", "monitor.cli"), "--config", str(config)]
    process = _spawn(argv, log)
    children.append(process)
    url = f"http://{HOST}:{ports['monitor']}/"
    _wait_http(url + "netdiscovery/health", process, log)
    return _record("monitor", process.pid, str(config), f"{url} (dashboard)", log)


def engine_lines(ports: dict[str, int]) -> str:
    """A complete engine file for this cluster: its ``[zookeeper]`` table and a spider
    sharing its crawl through the Redis frontier."""
    return (
        f'[zookeeper]\nhosts = "{HOST}:{ports["zookeeper"]}"\nsession_timeout = 4.0\n\n'
        "[[spiders]]  # the README's catalogue.py, crawling examples/local_site.py on port 8000\n"
        'spider = "catalogue.py:Catalogue"   # yours: "FILE.py:Class"\n\n'
        f'[spiders.settings]\nfrontier = "redis://{HOST}:{ports["redis"]}/0"'
    )


def _print_services(services: list[Service]) -> None:
    for service in services:
        state = "running" if is_ours(service) else "gone"
        print(f"  {service.name:<10} {service.address}  (pid {service.pid}, {state})")


# ---- down, status


def down(state_dir: Path) -> int:
    """Stop the recorded processes, the monitor first; then forget them."""
    services = load_state(state_dir)
    if not services:
        print(f"netdisco dev: nothing is up under {state_dir}")
        return 0
    for service in reversed(services):
        if is_ours(service):
            _terminate(service)
            print(f"  {service.name:<10} stopped (pid {service.pid})")
        else:
            print(f"  {service.name:<10} was not running (pid {service.pid} is not it)")
    _state_file(state_dir).unlink()
    print(f"netdisco dev: down (data and logs stay under {state_dir})")
    return 0


def status(state_dir: Path) -> int:
    services = load_state(state_dir)
    if not services:
        print(f"netdisco dev: nothing is up under {state_dir}")
        return 1
    running = [s for s in services if is_ours(s)]
    print(f"netdisco dev: {len(running)} of {len(services)} running under {state_dir}")
    _print_services(services)
    return 0 if len(running) == len(services) else 1
