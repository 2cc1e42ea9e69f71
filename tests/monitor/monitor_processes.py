"""Real ``netdisco-monitor`` processes on one cluster, and the receivers they alert."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import threading
from datetime import datetime
from email import message_from_bytes
from pathlib import Path
from typing import Any

from aiohttp import web

from netdisco.testing import free_port
from tests.monitor.conftest import REPO, Mailbox

#: every hook kind: e-mail to the sink, a webhook, a command and a callable, for engine_lost
TOML = """
[zookeeper]
hosts = "{hosts}"
session_timeout = {session}

[http]
port = {port}
poll_status = 0.0

[alerts]
grace = {grace}
batch_window = 0.0
retry_initial = 0.1
retry_max = 0.5

[email]
host = "127.0.0.1"
port = {smtp}
sender = "netdisco@example.org"
to = ["ops@example.org"]
events = ["engine_lost"]

[webhook]
url = "{webhook}"
events = ["engine_lost"]

[command]
argv = ["sh", "-c", 'line=$(cat); echo "$line" >> {commands}']
events = ["engine_lost"]

[callable]
target = "tests.monitor.hook_targets:to_file"
events = ["engine_lost"]
"""


class HeldMailbox(Mailbox):
    """Keeps each message as it arrives; while ``hold`` is set, answers it only when the
    test lets it go: the message is sent, and its monitor has not heard so (nor marked it)."""

    def __init__(self) -> None:
        super().__init__()
        self.hold = threading.Event()
        self.held = threading.Event()  # a message arrived and waits for its answer
        self.go = threading.Event()

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        self.messages.append(message_from_bytes(envelope.content))
        if self.hold.is_set():
            self.hold.clear()
            self.held.set()
            await asyncio.get_running_loop().run_in_executor(None, self.go.wait, 30)
        return "250 OK"


class Webhook:
    """A webhook receiver in the test's loop: every event it was posted."""

    def __init__(self) -> None:
        self.received: list[dict[str, Any]] = []
        self.port = free_port()
        self.runner: web.AppRunner | None = None

    async def start(self) -> str:
        async def take(request: web.Request) -> web.Response:
            self.received.append(await request.json())
            return web.Response(status=204)

        app = web.Application()
        app.router.add_post("/hook", take)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        await web.TCPSite(self.runner, "127.0.0.1", self.port).start()
        return f"http://127.0.0.1:{self.port}/hook"

    async def close(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()


class MonitorProcess:
    """One ``netdisco-monitor`` subprocess; its JSON log lines are collected as they come."""

    def __init__(self, proc: asyncio.subprocess.Process, port: int) -> None:
        self.proc = proc
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.logs: list[dict[str, Any]] = []
        self.reader = asyncio.create_task(self._read())

    @classmethod
    async def start(cls, config: str, tmp_path: Path, env: dict[str, str]) -> MonitorProcess:
        port = free_port()
        path = tmp_path / f"monitor-{port}.toml"
        path.write_text(config.replace("{port}", str(port)))
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "monitor.cli", "--config", str(path), "--log-json",
            cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO), **env},
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        return cls(proc, port)

    async def _read(self) -> None:
        assert self.proc.stderr is not None
        async for line in self.proc.stderr:
            if line.startswith(b"{"):
                self.logs.append(json.loads(line))

    def named(self, event: str) -> list[dict[str, Any]]:
        return [x for x in self.logs if x["event"] == event]

    def leading(self) -> bool:
        """Whether its last word on the latch is that it delivers."""
        said = [x["event"] for x in self.logs if x["event"] in ("alerts_leader", "alerts_follower")]
        return bool(said) and said[-1] == "alerts_leader"

    def kill(self) -> float:
        """``kill -9``; the time it was sent."""
        at = datetime.now().timestamp()
        self.proc.send_signal(signal.SIGKILL)
        return at

    async def stop(self) -> None:
        if self.proc.returncode is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(self.proc.wait(), 15)
            except TimeoutError:
                self.proc.send_signal(signal.SIGKILL)
                await self.proc.wait()
        await self.reader


def logged_at(line: dict[str, Any]) -> float:
    """When a log line was written (its ISO timestamp), as a Unix time."""
    return datetime.fromisoformat(line["timestamp"]).timestamp()
