"""The demo's plumbing: narration, child processes by pid, signals, the event feed.

Children run in their own process groups so that Ctrl-C reaches the demo alone;
the demo then stops them itself, by pid, gracefully first. ``Children.kill_all``
is the synchronous last resort its outermost ``finally`` always runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import aiohttp

from netdisco._polling import eventually, get_json
from netdisco.demo.site import ITEMS_ENV, SITE_ENV
from netdisco.exceptions import DemoFailed


class Narrator:
    """Short timestamped lines on stdout, flushed at once (the output may be a pipe)."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stdout
        self.started = time.monotonic()

    def say(self, who: str, text: str) -> None:
        elapsed = time.monotonic() - self.started
        print(f"[{elapsed:5.1f}s] {who:<13} {text}", file=self.stream, flush=True)

    def quote(self, lines: list[str]) -> None:
        for line in lines:
            print(f"{'':22}| {line}", file=self.stream, flush=True)


@dataclass
class Child:
    """A child process in its own process group (so its pgid is its pid)."""

    name: str
    process: subprocess.Popen[bytes]
    log: Path

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.poll() is None

    def signal(self, sig: int) -> None:
        """Signal the whole group, only while the leader is unreaped (its pid is still ours)."""
        if self.alive():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.pid, sig)


@dataclass
class Children:
    """Every process the demo started, to be stopped by pid whatever happens."""

    logs: Path
    env: dict[str, str]
    started: list[Child] = field(default_factory=list)

    def spawn(self, name: str, argv: list[str]) -> Child:
        log = self.logs / f"{name}.log"
        with log.open("wb") as handle:
            process = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=handle,
                stderr=subprocess.STDOUT,
                env=self.env,
                start_new_session=True,  # Ctrl-C reaches the demo only; it stops the rest
            )
        child = Child(name, process, log)
        self.started.append(child)
        return child

    async def wait(self, child: Child, timeout: float) -> int | None:
        """The exit code, or None if still running after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while child.alive():
            if time.monotonic() >= deadline:
                return None
            await asyncio.sleep(0.05)  # polling: Popen has no awaitable wait
        return child.process.poll()

    async def stop(self, child: Child, timeout: float = 10.0) -> int:
        """SIGTERM, then SIGKILL if it is still there after ``timeout`` seconds."""
        child.signal(signal.SIGTERM)
        code = await self.wait(child, timeout)
        if code is None:
            child.signal(signal.SIGKILL)
            code = await self.wait(child, 5.0)
        return -9 if code is None else code

    def alive(self) -> list[Child]:
        """The children still running, in the order they were started."""
        return [child for child in self.started if child.alive()]

    def kill_all(self) -> None:
        """Last resort, synchronous: SIGKILL every group still running and reap it."""
        for child in self.started:
            if child.alive():
                child.signal(signal.SIGKILL)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    child.process.wait(5)


def entry_point(script: str, module: str) -> list[str]:
    """The console script beside this interpreter, else ``python -m module``."""
    path = Path(sys.executable).with_name(script)
    return [str(path)] if path.exists() else [sys.executable, "-m", module]


def child_env(site: str, items: Path) -> dict[str, str]:
    """The environment minus the user's NETDISCO_* settings, plus where the demo site is."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("NETDISCO_")}
    env[SITE_ENV] = site
    env[ITEMS_ENV] = str(items)
    return env


_SHOWN = {"engine_joined", "engine_left", "engine_lost", "engine_restarted", "cluster_empty"}


class EventFeed:
    """Follows the monitor's ``/netdiscovery/events`` and narrates what it reports."""

    def __init__(self, session: aiohttp.ClientSession, url: str, narrator: Narrator) -> None:
        self.session = session
        self.url = url
        self.narrator = narrator
        self.events: list[dict[str, Any]] = []

    async def follow(self) -> None:
        while True:
            since = self.events[-1]["seq"] if self.events else 0
            body = await get_json(self.session, f"{self.url}?since={since}")
            for event in body.get("events", []) if isinstance(body, dict) else []:
                self.events.append(event)
                self._narrate(event)
            await asyncio.sleep(0.2)

    def _narrate(self, event: dict[str, Any]) -> None:
        kind = event.get("type", "?")
        if kind not in _SHOWN:
            return
        engine = event.get("engine") or {}
        where = f"(pid {engine['pid']}, port {engine.get('port')})" if "pid" in engine else ""
        self.narrator.say("monitor", f"event {kind:<14} {event.get('engine_id') or ''}  {where}")

    def find(self, kind: str, engine_id: str | None = None) -> dict[str, Any] | None:
        for event in self.events:
            if event.get("type") == kind and engine_id in (None, event.get("engine_id")):
                return event
        return None

    async def wait(
        self, kind: str, engine_id: str, timeout: float, *, watch: Child | None = None
    ) -> dict[str, Any]:
        """The first ``kind`` event about ``engine_id``; DemoFailed after ``timeout`` s,
        or at once if the ``watch`` process exits meanwhile (its log says why)."""

        async def check() -> dict[str, Any] | None:
            if watch is not None and not watch.alive():
                code = watch.process.returncode
                raise DemoFailed(f"{watch.name} exited with code {code}; see {watch.log}")
            return self.find(kind, engine_id)

        what = f"the monitor's {kind} event for {engine_id}"
        found: dict[str, Any] = await eventually(
            check, what, timeout=timeout, interval=0.1, error=DemoFailed
        )
        return found


@contextlib.contextmanager
def signals_cancel(
    task: asyncio.Task[Any], narrator: Narrator, received: list[int]
) -> Iterator[None]:
    """SIGINT/SIGTERM/SIGHUP cancel ``task`` once (its finally blocks stop everything)."""
    loop = asyncio.get_running_loop()
    handled = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

    def handler(signum: int) -> None:
        name = signal.Signals(signum).name
        if received:
            narrator.say("demo", f"{name}: still stopping, a few seconds at most")
            return
        received.append(signum)
        narrator.say("demo", f"{name}: stopping everything it started")
        task.cancel()

    for signum in handled:
        loop.add_signal_handler(signum, handler, signum)
    try:
        yield
    finally:
        for signum in handled:
            loop.remove_signal_handler(signum)
