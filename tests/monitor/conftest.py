"""Fixtures for the monitor: a real SMTP server (aiosmtpd), monitors and fake engines."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import replace
from email import message_from_bytes
from email.message import Message
from pathlib import Path
from typing import Any

import pytest
from aiosmtpd.controller import Controller

from monitor.config import load_config
from monitor.daemon import Monitor
from monitor.events import Event
from monitor.settings import MonitorConfig
from netdisco.testing import free_port
from tests.monitor.fake_engines import ENGINE_TOKEN, FakeEngine

REPO = Path(__file__).resolve().parents[2]


class Mailbox:
    """aiosmtpd handler that keeps every accepted message."""

    def __init__(self) -> None:
        self.messages: list[Message] = []

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        self.messages.append(message_from_bytes(envelope.content))
        return "250 OK"


class Smtp:
    """An SMTP server on loopback that can be started late (to test "down, then up")."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.mailbox = Mailbox()
        self.controller: Controller | None = None

    def start(self) -> None:
        self.controller = Controller(self.mailbox, hostname="127.0.0.1", port=self.port)
        self.controller.start()

    def stop(self) -> None:
        if self.controller is not None:
            self.controller.stop()
            self.controller = None


@pytest.fixture
def smtp() -> Iterator[Smtp]:
    server = Smtp(free_port())
    server.start()
    yield server
    server.stop()


@pytest.fixture
def smtp_down() -> Iterator[Smtp]:
    """An SMTP server whose port is reserved but not listening until ``start()``."""
    server = Smtp(free_port())
    yield server
    server.stop()


def monitor_config(zk_hosts: str, **sections: dict[str, Any]) -> MonitorConfig:
    """A test config: HTTP on a free port, short session timeout, quick retries."""
    overrides: dict[str, Any] = {
        "zookeeper.hosts": zk_hosts,
        "zookeeper.session_timeout": 2.0,
        "http.port": 0,
        "http.poll_status": 0.0,
        "alerts.grace": 0.0,
        "alerts.batch_window": 0.0,
        "alerts.retry_initial": 0.1,
        "alerts.retry_max": 0.5,
        "alerts.hook_timeout": 5.0,
    }
    for section, values in sections.items():
        overrides.update({f"{section}.{k}": v for k, v in values.items()})
    return load_config(None, env={}, overrides=overrides)


class Recorder:
    """Collects a monitor's events for assertions."""

    def __init__(self, monitor: Monitor) -> None:
        self.monitor = monitor
        self.events: list[Event] = []
        monitor.listeners.append(self.events.append)

    def of(self, type_: str, engine_id: str | None = None) -> list[Event]:
        return [
            e for e in self.events
            if e.type.value == type_ and (engine_id is None or e.engine_id == engine_id)
        ]  # fmt: skip

    def types(self, engine_id: str) -> list[str]:
        return [e.type.value for e in self.events if e.engine_id == engine_id]


MonitorFactory = Callable[..., Awaitable[tuple[Monitor, Recorder]]]


@pytest.fixture
async def start_monitor() -> AsyncIterator[MonitorFactory]:
    """Start monitors (``await start_monitor(config)``); all are closed at teardown."""
    started: list[Monitor] = []

    async def start(config: MonitorConfig, *, fresh: bool = True) -> tuple[Monitor, Recorder]:
        monitor = Monitor(config)
        recorder = Recorder(monitor)
        started.append(monitor)
        await monitor.start()
        if fresh:
            await asyncio.wait_for(monitor.watcher.fresh.wait(), 20)
        return monitor, recorder

    yield start
    for monitor in started:
        await monitor.close()


@pytest.fixture
def engines(zk_hosts: str) -> Iterator[Callable[..., FakeEngine]]:
    """In-process fake engines (sync kazoo; call them through ``asyncio.to_thread``)."""
    made: list[FakeEngine] = []

    def make(
        engine_id: str, root: str = "/netdiscovery", timeout: float = 1.0, *, legacy: bool = False
    ) -> FakeEngine:
        engine = FakeEngine(zk_hosts, root, engine_id, timeout, legacy=legacy, token=ENGINE_TOKEN)
        made.append(engine)
        return engine

    yield make
    for engine in made:
        engine.close()


class EngineProcess:
    """A fake engine in a subprocess, so it can be SIGKILLed; stopped by pid."""

    def __init__(self, hosts: str, engine_id: str, root: str = "/netdiscovery") -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.monitor.fake_engines", "serve", hosts, root, engine_id],
            cwd=REPO,
            stdout=subprocess.PIPE,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )
        assert self.proc.stdout is not None
        assert self.proc.stdout.readline().strip() == b"ready"

    def signal(self, sig: int) -> None:
        self.proc.send_signal(sig)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


@pytest.fixture
def engine_processes() -> Iterator[Callable[..., EngineProcess]]:
    made: list[EngineProcess] = []

    def make(hosts: str, engine_id: str, root: str = "/netdiscovery") -> EngineProcess:
        engine = EngineProcess(hosts, engine_id, root)
        made.append(engine)
        return engine

    yield make
    for engine in made:
        engine.stop()


@pytest.fixture
async def site() -> AsyncIterator[str]:
    """The engine tests' 200-page site on loopback, for real engines the monitor watches."""
    from tests.netdisco.engine_site import start_site

    runner, base = await start_site()
    yield base
    await runner.cleanup()


def with_grace(config: MonitorConfig, grace: float) -> MonitorConfig:
    return replace(config, alerts=replace(config.alerts, grace=grace))


#: starts ``netdisco engine --config`` for an engine id, with more ``[engine]`` keys
SpawnEngine = Callable[..., Awaitable[asyncio.subprocess.Process]]


@pytest.fixture
async def spawn_engine(tmp_path: Path, zk_hosts: str) -> AsyncIterator[SpawnEngine]:
    """Real ``netdisco engine`` processes on this test's ZooKeeper chroot: an ``[engine]``
    table of ``id``, a free ``port`` and any keys given (TOML values from Python ones);
    each logs to ``<id>.log`` and is killed by pid at teardown."""
    procs: list[asyncio.subprocess.Process] = []

    async def spawn(engine_id: str, **keys: Any) -> asyncio.subprocess.Process:
        extra = "".join(f"{key} = {json.dumps(value)}\n" for key, value in keys.items())
        config = tmp_path / f"{engine_id}.toml"
        config.write_text(
            f'[engine]\nid = "{engine_id}"\nport = {free_port()}\n{extra}'
            f'[zookeeper]\nhosts = "{zk_hosts}"\nsession_timeout = 2.0\n'
        )
        env = {k: v for k, v in os.environ.items() if not k.startswith("NETDISCO_")}
        log = open(tmp_path / f"{engine_id}.log", "wb")  # noqa: SIM115, ASYNC230 - the child owns it
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "netdisco.cli", "--log-json", "engine", "--config", str(config),
            env=env, stdout=log, stderr=log,
        )  # fmt: skip
        log.close()
        procs.append(proc)
        return proc

    yield spawn
    for proc in procs:
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
