"""Shared fixtures: real servers on loopback, started here and stopped by pid."""

from __future__ import annotations

import faulthandler
import os
import threading
import time
import uuid
from collections.abc import Generator, Iterator
from typing import Any

import pytest
from kazoo.client import KazooClient

from netdisco import logs
from netdisco.testing import ZooKeeperServer
from tests import hangs, reaper

# tests call the CLIs' main() in-process, which configure logging each time: a logger
# cached by the first would hide its lines from capture_logs in every later test
logs.CACHE_LOGGERS = False


@pytest.fixture(scope="session")
def zk_server() -> Iterator[ZooKeeperServer]:
    """One ZooKeeper server (tickTime 500 ms) for the whole session."""
    server = ZooKeeperServer()
    server.start()
    yield server
    server.close()


@pytest.fixture
def zk_hosts(zk_server: ZooKeeperServer) -> Iterator[str]:
    """A connection string with a fresh chroot, so tests never see each other's nodes."""
    chroot = f"/t-{uuid.uuid4().hex[:12]}"
    admin = KazooClient(hosts=zk_server.hosts)
    admin.start(timeout=15)
    admin.ensure_path(chroot)
    yield f"{zk_server.hosts}{chroot}"
    if zk_server.process is not None:
        admin.delete(chroot, recursive=True)
    admin.stop()
    admin.close()


# -- markers: `pytest -m "not zookeeper"` runs on a machine without Java ------------------

#: fixtures that start a server, and the marker a test using them gets
_SERVER_FIXTURES = {
    "zk_server": "zookeeper",
    "zk_hosts": "zookeeper",
    "redis_server": "redis",
    "redis_url": "redis",
}
#: a module that starts a server itself (not through a fixture) marks all its tests
_SERVER_CALLS = {
    "ZooKeeperServer(": "zookeeper",
    "KazooClient(": "zookeeper",
    "netdisco.demo": "zookeeper",
    "RedisServer(": "redis",
    "RedisClusterServer(": "redis",
}


def _module_markers(path: str, cache: dict[str, set[str]]) -> set[str]:
    if path not in cache:
        with open(path, encoding="utf-8") as handle:
            source = handle.read()
        cache[path] = {marker for call, marker in _SERVER_CALLS.items() if call in source}
    return cache[path]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark each test with the servers it needs, from its fixtures and its module."""
    cache: dict[str, set[str]] = {}
    for item in items:
        names = set(getattr(item, "fixturenames", ()))
        markers = {_SERVER_FIXTURES[n] for n in names & _SERVER_FIXTURES.keys()}
        markers |= _module_markers(str(item.path), cache)
        for marker in sorted(markers):
            item.add_marker(getattr(pytest.mark, marker))


# -- the suite's deadline: NETDISCO_SUITE_DEADLINE=seconds (make test sets it) -------------
#
# Each test is bounded by pytest-timeout (thread method: stacks, then the worker exits and
# xdist starts another). This bounds the run: when the deadline passes, the process that
# runs the session (the xdist controller, or pytest itself) names every test that started
# and has not finished, with how long it has run, and exits 3; each xdist worker dumps its
# threads' stacks a little before. Set it well under CI's limit.

#: nodeid -> when it started (monotonic), for the tests started and not finished yet
_running: dict[str, float] = {}
_running_lock = threading.Lock()


def _suite_deadline() -> float | None:
    value = os.environ.get("NETDISCO_SUITE_DEADLINE", "")
    return float(value) if value else None


def _deadline_passed(config: pytest.Config, deadline: float, own_stacks: bool) -> None:
    capture = config.pluginmanager.getplugin("capturemanager")
    if capture is not None:  # fd 2 is the capture's file while a test runs: the terminal's
        capture.suspend_global_capture(in_=True)
    now = time.monotonic()
    with _running_lock:
        running = sorted(_running.items(), key=lambda item: item[1])
    lines = [f"\n!!! suite deadline ({deadline:g} s) passed; tests still running:"]
    lines += [f"!!!   {nodeid}  (for {now - started:.0f} s)" for nodeid, started in running]
    if not running:
        lines.append("!!!   none (the hang is between tests: collection, a session fixture)")
    os.write(2, ("\n".join(lines) + "\n").encode())
    if own_stacks:  # without xdist the tests run here: show where
        faulthandler.dump_traceback(all_threads=True)
    _report_reaped(reaper.reap(os.environ[reaper.MARK]), "the suite deadline")
    os._exit(3)


def _real_stderr(session: pytest.Session) -> int:
    """A descriptor of the real stderr (fd 2 is the capture's file while a test runs)."""
    capture = session.config.pluginmanager.getplugin("capturemanager")
    if capture is None:
        return os.dup(2)
    capture.suspend_global_capture()
    try:
        return os.dup(2)  # kept open: the stacks are written to it at the deadline
    finally:
        capture.resume_global_capture()


#: the real stderr of the process that runs the tests, for the hang witness and the stacks
_witness_fd: list[int] = []


def pytest_sessionstart(session: pytest.Session) -> None:
    if not session.config.pluginmanager.has_plugin("dsession"):  # xdist's controller runs none
        _witness_fd.append(_real_stderr(session))
    deadline = _suite_deadline()
    if deadline is None:
        return
    if os.environ.get("PYTEST_XDIST_WORKER"):  # the controller names the tests; we show where
        faulthandler.dump_traceback_later(max(deadline - 10, 1), file=_witness_fd[0])
        return
    controller = session.config.pluginmanager.has_plugin("dsession")  # xdist's, with -n
    args = (session.config, deadline, not controller)
    timer = threading.Timer(deadline, _deadline_passed, args=args)
    timer.daemon = True
    timer.start()


def _timeout(item: pytest.Item) -> float:
    """The test's pytest-timeout: its marker's, else the command line's, else the ini's."""
    marker = item.get_closest_marker("timeout")
    if marker is not None and (marker.args or "timeout" in marker.kwargs):
        return float(marker.args[0] if marker.args else marker.kwargs["timeout"])
    value = item.config.getoption("timeout", None)
    return float(value if value is not None else item.config.getini("timeout") or 0)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Generator[None, None, None]:
    """Arm the hang witness (tests/hangs.py) for as long as the test runs."""
    if not _witness_fd:
        yield
        return
    watch = hangs.Watch(_witness_fd[0], item.nodeid, _timeout(item))
    try:
        yield
    finally:
        watch.disarm()


def pytest_runtest_logstart(nodeid: str) -> None:
    with _running_lock:
        _running[nodeid] = time.monotonic()


def pytest_runtest_logfinish(nodeid: str) -> None:
    with _running_lock:
        _running.pop(nodeid, None)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    when: str = report.when  # xdist's report of a crash says "???", which pytest's never do
    if when == "???":  # the worker running it crashed: it will not finish
        with _running_lock:
            _running.pop(report.nodeid, None)


# -- nothing left behind: every process a test starts carries the run's mark -------------
#
# The run's id goes into the environment before xdist starts its workers, so every server,
# engine and CLI a test starts inherits it (tests/reaper.py). A crashed worker's processes
# are stopped as it goes down; at the end, anything still marked is a test that leaked a
# process: it is stopped and the run fails.


def _report_reaped(found: list[reaper.Leftover], when: str) -> None:
    for leftover in found:
        os.write(2, f"!!! stopped at {when}: pid {leftover.pid}: {leftover.command}\n".encode())


def pytest_configure(config: pytest.Config) -> None:
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        os.environ.setdefault(reaper.MARK, uuid.uuid4().hex)


def pytest_testnodedown(node: Any, error: object) -> None:
    """xdist's hook: a worker ended; if it crashed, what it started goes with it."""
    if error:
        worker = str(node.gateway.id)
        _report_reaped(reaper.reap(os.environ[reaper.MARK], worker), f"{worker}'s crash")


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    if os.environ.get("PYTEST_XDIST_WORKER"):  # the controller looks once every worker ended
        return
    found = reaper.reap(os.environ[reaper.MARK])
    if found:
        _report_reaped(found, "the end of the run (a test leaked them)")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
