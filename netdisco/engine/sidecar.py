"""The HTTP endpoint served from a child process (``api_process = true``).

Measured here: aiohttp spends about 100 µs of CPU on each request, so 3,000 status
polls a second would take a third of the crawl's core if the engine's loop served
them. With this front, the engine's own application listens only on a private Unix
socket, and ``statusd.py`` (a child process) listens on the engine's address: it
answers the read routes from answers the engine pushes to it (rendered at most every
``status_cache`` seconds, and at once on any state change), and passes every other
request to the engine's application. The engine's cost no longer grows with the
polling rate. The child exits when its stdin closes, so it never outlives the engine;
if it dies on its own, it is started again on the same port.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import structlog
from aiohttp import web

from netdisco._tasks import Tasks
from netdisco.engine import statusd
from netdisco.engine.api import (
    HttpEndpoint,
    create_app,
    engine_body,
    health_body,
    live_body,
    ready_body,
    spiders_body,
)
from netdisco.engine.config import is_loopback
from netdisco.engine.replies import dumps

if TYPE_CHECKING:
    from netdisco.engine.engine import SpiderEngine  # which imports this module: types only

log = structlog.get_logger(__name__)

#: the longest the child may take to bind and say so
START_TIMEOUT = 30.0
#: the engine sends a line at least this often, so the child can tell it is alive
HEARTBEAT = 1.0


def default_front(engine: SpiderEngine) -> HttpEndpoint | StatusProcess:
    """The front ``api_process`` asks for: a child process, or the engine's own loop."""
    return StatusProcess(engine) if engine.settings.api_process else HttpEndpoint(engine)


def answers(engine: SpiderEngine) -> dict[str, tuple[int, str]]:
    """The read routes' answers right now, by path. One that fails to render is left
    out, so the request goes to the engine's app, which answers (and logs) the error."""
    found: dict[str, tuple[int, Any]] = {}
    with contextlib.suppress(Exception):
        found["/netdiscovery/health"] = health_body(engine)
        found["/netdiscovery/live"] = live_body(engine)
        found["/netdiscovery/ready"] = ready_body(engine)
    with contextlib.suppress(Exception):
        found["/netdiscovery/engine"] = (200, engine_body(engine))
    with contextlib.suppress(Exception):
        spiders = spiders_body(engine)
        found["/netdiscovery/spiders"] = (200, spiders)
        found.update({f"/netdiscovery/spiders/{s['name']}": (200, s) for s in spiders})
    return {path: (status, dumps(body).decode()) for path, (status, body) in found.items()}


class StatusProcess:
    """An ``HttpFront``: the engine's application behind a child process; see the module."""

    def __init__(self, engine: SpiderEngine) -> None:
        self._engine = engine
        self._changed = asyncio.Event()
        engine.add_listener(lambda _engine: self._changed.set())
        self._runner: web.AppRunner | None = None
        self._dir: Path | None = None
        self._proc: asyncio.subprocess.Process | None = None
        self._tasks = Tasks()  # the publisher and the supervisor of the child
        self._sent: dict[str, tuple[int, str]] = {}
        self._stopping = False
        self._seq = 0
        self.loopback = True

    async def start(self, host: str, port: int) -> int:
        """Serve the app on a private socket, then the child on ``host:port``."""
        self._dir = Path(tempfile.mkdtemp(prefix="netdisco-api-"))  # mode 0700
        self.loopback = is_loopback(host)
        app = create_app(self._engine, behind=self)
        self._runner = web.AppRunner(
            app, access_log=None, handle_signals=False, shutdown_timeout=5.0
        )
        await self._runner.setup()
        await web.UnixSite(self._runner, str(self._dir / "engine.sock")).start()
        try:
            bound = await self._spawn(host, port)
        except BaseException:
            await self.stop()
            raise
        self._tasks.spawn(self._publish(), name="status-publish")
        self._tasks.spawn(self._supervise(host, bound), name="status-supervise")
        return bound

    async def _spawn(self, host: str, port: int) -> int:
        """Start the child and wait for the port it bound (OSError if it could not)."""
        assert self._dir is not None
        settings = self._engine.settings
        args = [str(Path(statusd.__file__)), host, str(port), str(self._dir / "engine.sock")]
        args += [str(settings.max_body), str(settings.loop_stall)]
        self._proc = await asyncio.create_subprocess_exec(
            sys.executable, "-P", *args, stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )  # fmt: skip
        assert self._proc.stdout is not None
        line = await asyncio.wait_for(self._proc.stdout.readline(), START_TIMEOUT)
        said: dict[str, Any] = json.loads(line) if line.strip() else {"error": "it exited"}
        if "port" not in said:
            raise OSError(f"the status process did not start: {said.get('error')}")
        self._sent = {}
        return int(said["port"])

    async def _publish(self) -> None:
        """Send what changed every ``status_cache`` s (counters move without notice), at
        once on a state change, and a heartbeat at least every second."""
        every = min(max(self._engine.settings.status_cache, 0.01), HEARTBEAT)
        while True:
            with contextlib.suppress(ConnectionError):  # the supervisor restarts the child
                await self._send(answers(self._engine))
            # not wait_for: on 3.11 it returns, swallowing a cancel that lands as the event
            # is set, and this loop (so stop()) would never end; asyncio.timeout does not
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(every):
                    await self._changed.wait()
            self._changed.clear()

    async def _send(self, now: dict[str, tuple[int, str]]) -> None:
        proc = self._proc
        if proc is None or proc.stdin is None:
            return
        lines = [
            {"path": path, "status": status, "body": body}
            for path, (status, body) in now.items()
            if self._sent.get(path) != (status, body)
        ]
        lines += [{"path": path, "gone": True} for path in self._sent.keys() - now.keys()]
        lines.append({"seq": self._seq, "engine": self._engine.id})  # heartbeat: batch's end
        proc.stdin.write(b"".join(json.dumps(line).encode() + b"\n" for line in lines))
        self._sent = now  # before the await: the next batch is a diff against this one
        await proc.stdin.drain()

    async def publish(self) -> int:
        """Send the answers now; the number of the batch that holds them."""
        self._seq += 1
        with contextlib.suppress(ConnectionError):
            await self._send(answers(self._engine))
        return self._seq

    async def _supervise(self, host: str, port: int) -> None:
        """Start the child again, on the same port, if it dies while the engine runs."""
        while not self._stopping:
            assert self._proc is not None
            code = await self._proc.wait()
            if self._stopping:
                return
            log.error("status_process_died", code=code, port=port)
            await asyncio.sleep(1.0)
            with contextlib.suppress(OSError, TimeoutError):
                await self._spawn(host, port)
                self._changed.set()

    async def stop(self) -> None:
        """Close the child's stdin (it exits), then the app and its socket."""
        self._stopping = True
        await self._tasks.cancel_all()
        await self._end_child()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    async def _end_child(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None or proc.returncode is not None:
            return
        if proc.stdin is not None:
            proc.stdin.close()
        try:
            await asyncio.wait_for(proc.wait(), 5.0)
        except TimeoutError:
            proc.kill()
            await proc.wait()
