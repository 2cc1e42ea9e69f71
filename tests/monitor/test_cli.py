"""``netdisco-monitor`` as users run it: a subprocess with a TOML file, signals, ``check``."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
import threading
import urllib.request
from pathlib import Path
from typing import Any

import aiohttp

from netdisco.testing import eventually, free_port, wait_for
from tests.monitor.conftest import REPO

TOML = """
[zookeeper]
hosts = "{hosts}"
session_timeout = 2.0

[http]
port = {port}

[alerts]
grace = 0.5
batch_window = 0.0
state_file = "{state}"

[email]
host = "127.0.0.1"
port = {smtp}
sender = "netdisco@example.org"
to = ["ops@example.org"]
password_env = "TEST_SMTP_PASSWORD"
events = ["engine_lost"]
"""

ENV = {**os.environ, "PYTHONPATH": str(REPO), "TEST_SMTP_PASSWORD": "hunter2-secret"}


class Daemon:
    """The monitor in a subprocess; its JSON log lines are collected as they come."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.logs: list[dict[str, Any]] = []
        self.raw: list[str] = []
        self.reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        assert self.proc.stderr is not None
        async for line in self.proc.stderr:
            text = line.decode()
            self.raw.append(text)
            if text.startswith("{"):
                self.logs.append(json.loads(text))

    def named(self, event: str) -> list[dict[str, Any]]:
        return [x for x in self.logs if x["event"] == event]


async def _cli(*args: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "monitor.cli", *args, cwd=REPO, env=ENV,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip


async def _check(port: int) -> tuple[int, str]:
    proc = await _cli("check", "--url", f"http://127.0.0.1:{port}", "--timeout", "2")
    out, _ = await proc.communicate()
    return proc.returncode or 0, out.decode()


async def test_daemon_beside_two_engines(zk_hosts, tmp_path: Path, smtp, engine_processes):
    """The issue's "done when": joins, an e-mail for the SIGKILLed one, the other's leave."""
    port = free_port()
    config = tmp_path / "monitor.toml"
    state = tmp_path / "state.json"
    config.write_text(TOML.format(hosts=zk_hosts, port=port, smtp=smtp.port, state=state))
    daemon = Daemon(await _cli("--config", str(config), "--log-json"))
    try:
        await eventually(lambda: daemon.named("baseline"), what="baseline")
        calm = await asyncio.to_thread(engine_processes, zk_hosts, "calm")
        doomed = await asyncio.to_thread(engine_processes, zk_hosts, "doomed")
        await eventually(lambda: len(daemon.named("engine_joined")) == 2, what="two joins")
        url = f"http://127.0.0.1:{port}/netdiscovery/monitor"
        async with aiohttp.ClientSession() as session, session.get(url) as resp:
            shown = sorted(e["id"] for e in (await resp.json())["engines"])
        assert shown == ["calm", "doomed"]
        assert await _check(port) == (
            0,
            "ok: 2 engines online, 1 monitor running (this one delivers the alerts)\n",
        )

        doomed.signal(signal.SIGKILL)
        await eventually(lambda: smtp.mailbox.messages, what="the e-mail about the lost engine")
        assert "doomed" in smtp.mailbox.messages[0]["Subject"]
        calm.signal(signal.SIGTERM)
        await eventually(lambda: daemon.named("engine_left"), what="the graceful leave")
        assert [x["engine_id"] for x in daemon.named("engine_left")] == ["calm"]
        assert [x["engine_id"] for x in daemon.named("engine_lost")] == ["doomed"]

        daemon.proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(daemon.proc.wait(), 20) == 0
        await daemon.reader
        (summary,) = daemon.named("monitor_stopped")
        assert summary["events"]["engine_joined"] == 2
        assert summary["alerts_sent"] == 1
        assert not any("hunter2" in line for line in daemon.raw)  # secrets never logged
        code, out = await _check(port)
        assert code == 1
        assert out.startswith("unreachable")
        assert json.loads(state.read_text())["root"] == "/netdiscovery"
    finally:
        if daemon.proc.returncode is None:
            daemon.proc.kill()
            await daemon.proc.wait()
        daemon.reader.cancel()


async def test_sigint_also_stops_with_one_summary(zk_hosts):
    daemon = Daemon(await _cli("--zk", zk_hosts, "--port", "0", "--log-json"))
    await eventually(lambda: daemon.named("baseline"), what="baseline")
    daemon.proc.send_signal(signal.SIGINT)
    assert await asyncio.wait_for(daemon.proc.wait(), 20) == 0
    await daemon.reader
    assert len(daemon.named("monitor_stopped")) == 1


async def test_bad_config_fails_at_start_naming_the_key(tmp_path: Path):
    config = tmp_path / "monitor.toml"
    config.write_text('[zookeeper]\nhosts = "127.0.0.1:1"\n[alerts]\ngrace = "soon"\n')
    proc = await _cli("--config", str(config))
    _, err = await proc.communicate()
    assert proc.returncode == 2
    assert "alerts.grace" in err.decode()
    proc = await _cli("--port", "80")
    _, err = await proc.communicate()
    assert proc.returncode == 2
    assert "zookeeper.hosts" in err.decode()


async def test_port_in_use_is_one_clear_line(zk_hosts):
    server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        proc = await _cli("--zk", zk_hosts, "--port", str(port))
        _, err = await proc.communicate()
    finally:
        server.close()
        await server.wait_closed()
    assert proc.returncode == 1
    assert "address already in use" in err.decode().strip().splitlines()[-1]


STALL_TOML = """
[zookeeper]
hosts = "{hosts}"
session_timeout = 10.0

[http]
port = {port}

[rules]
grace = 0.0
"""


async def test_an_engine_whose_loop_is_blocked_is_reported_stalled_then_recovered(
    zk_hosts: str, tmp_path: Path
) -> None:
    """The engine (in this process) blocks its loop in a callback; the monitor (its own
    process) reads the znode its watchdog thread marks, and says so, once each way. The
    callback blocks until a thread has seen the monitor report the stall (at most 30 s),
    so the report is never raced against a fixed block."""
    from aiohttp import web

    from netdisco import Request, Response, Settings, Spider
    from netdisco.engine import SpiderEngine
    from netdisco.engine.config import EngineSettings
    from netdisco.testing import serve

    reported = threading.Event()  # the monitor said engine_stalled, read by a thread
    released: list[bool] = []  # whether the callback was released before its cap

    class Blocking(Spider):
        name = "blocking"
        go = asyncio.Event()

        async def start(self) -> Any:
            await self.go.wait()
            yield Request(self.start_urls[0])

        def parse(self, response: Response) -> Any:
            # the whole loop stops: only kazoo's, the watchdog's and the reader's threads run
            released.append(reported.wait(30.0))
            yield {"url": response.url}

    async def page(_request: web.Request) -> web.Response:
        return web.Response(text="<html>ok</html>", content_type="text/html")

    app = web.Application()
    app.router.add_get("/", page)
    port = free_port()
    config = tmp_path / "monitor.toml"
    config.write_text(STALL_TOML.format(hosts=zk_hosts, port=port))
    daemon = Daemon(await _cli("--config", str(config), "--log-json"))
    settings = EngineSettings(id="stuck", port=0, loop_stall=1.0, loop_stall_drop=60.0)
    try:
        await eventually(lambda: daemon.named("baseline"), what="baseline")
        async with (
            serve(app) as base,
            SpiderEngine(
                settings, zookeeper={"hosts": zk_hosts, "session_timeout": 10.0}
            ) as engine,
        ):
            spider = Blocking(start_urls=[base + "/"])
            engine.add_spider(spider, Settings(progress_interval=0))
            await engine.start()
            await eventually(lambda: daemon.named("engine_joined"), what="the join")
            reader = threading.Thread(target=_until_stalled, args=(port, reported), daemon=True)
            reader.start()
            spider.go.set()
            await engine.wait()  # blocked in here until the monitor has reported the stall
            await eventually(lambda: daemon.named("engine_recovered"), what="the recovery")
            await asyncio.to_thread(reader.join, 30)
        assert released == [True], "engine_stalled was not reported while the loop was blocked"
        (stalled,) = daemon.named("engine_stalled")
        assert stalled["engine_id"] == "stuck"
        assert stalled["loop_lag"] >= 1.0
        assert [x["engine_id"] for x in daemon.named("engine_recovered")] == ["stuck"]
        assert not daemon.named("engine_lost")  # the session lived: a stall, not a loss
    finally:
        daemon.proc.kill()
        await daemon.proc.wait()
        daemon.reader.cancel()


def _until_stalled(port: int, reported: threading.Event) -> None:
    """Ask the monitor's recent events (from a thread: the test's loop is blocked) until
    one says engine_stalled, then set ``reported``; give up after 30 s."""
    url = f"http://127.0.0.1:{port}/netdiscovery/events"

    def stalled() -> bool | None:
        with urllib.request.urlopen(url, timeout=5) as reply:
            events = json.loads(reply.read())["events"]
        return True if any(e["type"] == "engine_stalled" for e in events) else None

    with contextlib.suppress(TimeoutError):
        wait_for("engine_stalled", stalled, 30.0, every=0.05)
        reported.set()
