"""The endpoint served by a child process (``api_process = true``), over real HTTP.

The routes themselves are checked in both modes by ``test_api.py``; these tests are
about the process: it owns the port, never outlives the engine, comes back when it
dies, says so when the engine's loop stops answering, and fails the start cleanly.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import threading
import urllib.error
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from netdisco.crawl.settings import Settings
from netdisco.engine import SpiderEngine
from netdisco.engine.config import EngineSettings
from netdisco.engine.sidecar import StatusProcess
from netdisco.testing import eventually, wait_for

from .engine_site import site_spider

SLOW = Settings(progress_interval=0, concurrency=1)


def front(engine: SpiderEngine) -> StatusProcess:
    found = engine._http  # the front the engine started (private: this is its test)
    assert isinstance(found, StatusProcess)
    return found


def child_pid(engine: SpiderEngine) -> int:
    proc = front(engine)._proc
    assert proc is not None
    return proc.pid


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().split(")")[1].split()[0] != "Z"


@pytest.fixture
async def engine(site: str) -> AsyncIterator[SpiderEngine]:
    started = SpiderEngine(EngineSettings(id="e-child", port=0, api_process=True))
    started.add_spider(site_spider("one", site, "slow"), SLOW)
    await started.start()
    yield started
    await started.stop(deadline=1.0)


async def get(port: int, path: str) -> tuple[int, Any]:
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"http://127.0.0.1:{port}{path}") as response,
    ):
        return response.status, await response.json()


async def test_the_child_owns_the_port_and_comes_back_when_killed(engine: SpiderEngine) -> None:
    pid = child_pid(engine)
    assert pid != os.getpid()
    assert alive(pid)
    status, body = await get(engine.port, "/netdiscovery/spiders/one")
    assert (status, body["name"]) == (200, "one")
    os.kill(pid, signal.SIGKILL)

    async def answered_by_a_new_child() -> bool:
        try:
            status, _ = await get(engine.port, "/netdiscovery/engine")
        except aiohttp.ClientError:
            return False
        return status == 200 and child_pid(engine) != pid

    await eventually(answered_by_a_new_child, "a new status process on the same port")


async def test_the_child_and_its_socket_go_with_the_engine(site: str) -> None:
    engine = SpiderEngine(EngineSettings(id="e-gone", port=0, api_process=True))
    engine.add_spider(site_spider("one", site, "slow"), SLOW)
    await engine.start()
    pid, folder = child_pid(engine), front(engine)._dir
    assert folder is not None
    assert (folder / "engine.sock").exists()
    await engine.stop(deadline=1.0)
    assert not alive(pid)
    assert not folder.exists()
    with pytest.raises(aiohttp.ClientConnectionError):
        await get(engine.port, "/netdiscovery/health")


@pytest.mark.timeout(180)
async def test_a_stop_in_the_same_turn_as_a_change_still_ends() -> None:
    """A change notice and the stop in one loop turn (a spider stopping sends both): the
    publisher must not take its cancel for the wake-up and publish on forever (it did on
    Python 3.11, whose wait_for returns when the awaited event is set as it is cancelled)."""
    engine = SpiderEngine(EngineSettings(id="e-turn", port=0, api_process=True))
    await engine.start()
    made = front(engine)
    try:
        # the publisher has sent its first batch and waits for a change (not a fixed time)
        await eventually(lambda: made._changed._waiters, "the publisher waits", timeout=10)
        made._changed.set()
        async with asyncio.timeout(10):
            await made.stop()
        assert all(task.done() for task in made._tasks)
    finally:
        for task in made._tasks:  # without the fix: it is still going, let the test end
            task.cancel()
        await engine.stop()


async def test_a_blocked_engine_loop_reads_as_unresponsive_not_ok(site: str) -> None:
    settings = EngineSettings(id="e-block", port=0, api_process=True, loop_stall=1.0)
    engine = SpiderEngine(settings)
    engine.add_spider(site_spider("one", site, "slow"), SLOW)
    await engine.start()
    try:
        assert (await get(engine.port, "/netdiscovery/health"))[0] == 200
        # the engine's loop blocks (a CPU-bound callback, say) until a thread, asking
        # meanwhile, has read it as unresponsive (at most 30 s: then the assert fails)
        unblock = threading.Event()
        asked = asyncio.get_running_loop().run_in_executor(
            None, _health_until_unresponsive, engine.port, unblock
        )
        unblock.wait(30.0)  # blocking the loop is the point
        status, code = await asked
        assert (status, code) == (503, "engine_unresponsive")
        assert (await eventually(lambda: _health(engine.port)[0] == 200)) is True
    finally:
        await engine.stop(deadline=1.0)


def _health_until_unresponsive(port: int, unblock: threading.Event) -> tuple[int, str | None]:
    """GET /health from a thread until it reads as unresponsive (or 30 s passed), then
    ``unblock``: the last status and error code."""
    said: list[tuple[int, str | None]] = []

    def unresponsive() -> bool | None:
        said.append(_health(port))
        return True if said[-1] == (503, "engine_unresponsive") else None

    with contextlib.suppress(TimeoutError):
        wait_for("an unresponsive /health", unresponsive, 30.0, every=0.05)
    unblock.set()
    return said[-1]


def _health(port: int) -> tuple[int, str | None]:
    """Status and error code of GET /health (blocking: for a thread)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/netdiscovery/health") as reply:
            return reply.status, None
    except urllib.error.HTTPError as exc:
        body = json.loads(exc.read())  # an error, or the health body of a stalled engine
        return exc.code, body["error"]["code"] if "error" in body else body["status"]


async def test_a_taken_port_fails_the_start_and_leaves_nothing(site: str) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        engine = SpiderEngine(EngineSettings(id="e-taken", port=port, api_process=True))
        engine.add_spider(site_spider("one", site, "slow"), SLOW)
        with pytest.raises(OSError, match=f"cannot serve HTTP on 127.0.0.1:{port}"):
            await engine.start()
    made = front(engine)
    assert made._proc is None
    assert made._dir is None


async def test_a_malformed_line_is_ignored_and_the_child_serves_on(engine: SpiderEngine) -> None:
    proc = front(engine)._proc
    assert proc is not None
    assert proc.stdin is not None
    proc.stdin.write(b"not json\n" + b'{"path": "/x", "status": "NaN", "body": 1}\n')
    # then a good line: once it is served, the child has read past the bad ones
    probe = {"path": "/netdiscovery/probe", "status": 200, "body": '{"probe": 1}'}
    proc.stdin.write(json.dumps(probe).encode() + b"\n")
    await proc.stdin.drain()

    async def probe_served() -> bool:
        return await get(engine.port, "/netdiscovery/probe") == (200, {"probe": 1})

    await eventually(probe_served, "the line after the bad ones, served", timeout=10)
    assert (await get(engine.port, "/netdiscovery/spiders/one"))[0] == 200
    assert alive(proc.pid)
