"""Machines as Linux network namespaces, joined by veth pairs to one bridge.

Every name starts with ``ndc`` (namespaces, links, the bridge) and every address is in
198.18.0.0/15 (RFC 2544, set aside for network benchmarks). The bridge lives in a
namespace of its own (``ndc-hub``), which this process enters: the host's interfaces
and routes are never touched, and no namespace has a default route, so nothing can
leave the machines. ``Network.cleanup()`` kills every process in the namespaces and
deletes them (their links go with them); it also runs at start for a previous run's
leftovers. Needs root and iproute2.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import IO

PREFIX = "ndc-"
HUB = "ndc-hub"
BRIDGE = "ndc-br"
NETNS_DIR = Path("/run/netns")
CLONE_NEWNET = 0x40000000


def ip(*args: str, ns: str | None = None, check: bool = True) -> str:
    argv = ["ip", *(["-n", ns] if ns else []), *args]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=20)
    if check and done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {done.stderr.strip()}")
    return done.stdout


def ours() -> list[str]:
    """The namespaces of this harness left from any run, by their prefix."""
    listed = ip("netns", "list").split()
    return [name for name in listed if name.startswith(PREFIX)]


def _enter(ns: str) -> None:
    """Move this (single-threaded) process into namespace ``ns``."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(NETNS_DIR / ns, os.O_RDONLY)
    try:
        if libc.setns(fd, CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), f"setns {ns}")
    finally:
        os.close(fd)


class Network:
    """The hub with its bridge (198.18.0.1/15) and one namespace per machine."""

    def __init__(self, machines: dict[str, str], logs: Path) -> None:
        self.machines = machines  # name -> address
        self.logs = logs
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.blackholes: set[tuple[str, str]] = set()

    def ns(self, machine: str) -> str:
        return PREFIX + machine

    def build(self) -> None:
        """The hub, the bridge, a machine per entry; this process ends up in the hub."""
        cleanup()
        ip("netns", "add", HUB)
        _enter(HUB)
        ip("link", "set", "lo", "up")
        ip("link", "add", BRIDGE, "type", "bridge")
        ip("addr", "add", "198.18.0.1/15", "dev", BRIDGE)
        ip("link", "set", BRIDGE, "up")
        for machine, address in self.machines.items():
            ns = self.ns(machine)
            ip("netns", "add", ns)
            ip("link", "add", ns, "type", "veth", "peer", "name", "ndc0", "netns", ns)
            ip("link", "set", ns, "master", BRIDGE)
            ip("link", "set", ns, "up")
            ip("link", "set", "lo", "up", ns=ns)
            ip("addr", "add", f"{address}/15", "dev", "ndc0", ns=ns)
            ip("link", "set", "ndc0", "up", ns=ns)
        if "default" in ip("route", "show"):
            raise RuntimeError("the hub has a default route")

    def spawn(self, name: str, machine: str, argv: list[str], env: dict[str, str]) -> int:
        """Start ``argv`` on ``machine`` in a session of its own; its output to a log."""
        self.logs.mkdir(parents=True, exist_ok=True)
        log: IO[bytes]
        with open(self.logs / f"{name}.log", "ab") as log:
            self.procs[name] = subprocess.Popen(
                ["ip", "netns", "exec", self.ns(machine), *argv],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                env=env, start_new_session=True,
            )  # fmt: skip
        return self.procs[name].pid

    def kill(self, name: str, sig: int = signal.SIGKILL, wait: float = 30.0) -> int | None:
        proc = self.procs.pop(name, None)
        if proc is None:
            return None
        if proc.poll() is None:
            os.killpg(proc.pid, sig)
        try:
            return proc.wait(wait)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            return proc.wait(10)

    def cut(self, machine: str) -> None:
        """The machine's link down at the bridge: every packet to or from it is lost."""
        ip("link", "set", self.ns(machine), "down")

    def mend(self, machine: str) -> None:
        ip("link", "set", self.ns(machine), "up")

    def cut_pair(self, a: str, b: str) -> None:
        """A blackhole route on each side: only ``a`` and ``b`` stop hearing each other."""
        for here, there in ((a, b), (b, a)):
            ip("route", "add", "blackhole", f"{self.machines[there]}/32", ns=self.ns(here))
            self.blackholes.add((here, there))

    def mend_pair(self, a: str, b: str) -> None:
        for here, there in ((a, b), (b, a)):
            ip("route", "del", "blackhole", f"{self.machines[there]}/32", ns=self.ns(here))
            self.blackholes.discard((here, there))

    def close(self) -> None:
        for name in list(self.procs):
            self.kill(name, signal.SIGTERM, wait=10)
        cleanup()


def cleanup() -> None:
    """Kill what runs in our namespaces, then delete them (their veths and bridge go too)."""
    for ns in ours():
        for pid in _others(ns):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while _others(ns) and time.monotonic() < deadline:
            time.sleep(0.1)
        ip("netns", "del", ns, check=False)


def leftovers(mark: tuple[str, str]) -> list[str]:
    """What a run left behind after ``close``: namespaces and links of ours (in the host's
    own namespace, read through pid 1), and processes whose environment carries
    ``mark`` (a variable every process of the run was given)."""
    found = [f"namespace {ns}" for ns in ours()]
    with contextlib.suppress(OSError):
        for line in Path("/proc/1/net/dev").read_text().splitlines()[2:]:
            name = line.split(":", 1)[0].strip()
            if name.startswith("ndc"):
                found.append(f"link {name}")
    wanted = f"{mark[0]}={mark[1]}".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if wanted in environ:
            found.append(f"process {entry.name}: {command[:120]}")
    return found


def _others(ns: str) -> set[int]:
    """The processes in ``ns`` but this one and its children (``ip`` listing them)."""
    me = os.getpid()
    found = set()
    for pid in ip("netns", "pids", ns, check=False).split():
        try:
            parent = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue  # gone already
        if int(pid) != me and parent != me:
            found.add(int(pid))
    return found
