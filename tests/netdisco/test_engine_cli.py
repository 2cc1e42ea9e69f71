"""``netdisco engine --config`` as a real subprocess: serve, control, SIGTERM -> exit 0."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from netdisco.testing import free_port

TOKEN = "cli-secret-token-42"
SPIDERS = """
from netdisco import Spider

class One(Spider):
    name = "one"
    start_urls = ["{base}/slow/p/0"]
    allowed_domains = ["127.0.0.1"]

    def parse(self, response):
        yield {{"url": response.url}}
        for href in response.css("a::attr(href)").getall():
            yield response.follow(href, callback=self.parse)

class Two(One):
    name = "two"

class Hang(One):
    name = "hang"
    start_urls = ["{base}/hang"]
"""


def write_config(tmp_path: Path, base: str, port: int, settings: str = "concurrency = 2") -> Path:
    (tmp_path / "spiders.py").write_text(SPIDERS.format(base=base))
    config = tmp_path / "engine.toml"
    config.write_text(
        f'[engine]\nid = "cli-engine"\nport = {port}\n'
        f'[[spiders]]\nspider = "{tmp_path}/spiders.py:One"\nsettings = {{ {settings} }}\n'
        f'[[spiders]]\nspider = "{tmp_path}/spiders.py:Two"\n'
    )
    return config


async def spawn(*args: str, token: str | None = None) -> asyncio.subprocess.Process:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NETDISCO_")}
    if token:
        env["NETDISCO_TOKEN"] = token
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "netdisco.cli", "--log-json", "engine", *args,
        env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip


@contextlib.asynccontextmanager
async def stopped_at_exit(proc: asyncio.subprocess.Process) -> AsyncIterator[None]:
    """Whatever the test does, the engine process does not outlive it (SIGKILL by pid)."""
    try:
        yield
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def get_json(session: aiohttp.ClientSession, url: str, deadline: float = 20.0) -> object:
    """GET ``url`` until the engine answers (it is still starting), then its JSON."""
    loop = asyncio.get_running_loop()
    stop_at = loop.time() + deadline
    while True:
        try:
            async with session.get(url) as response:
                assert response.status == 200
                return await response.json()
        except aiohttp.ClientConnectionError:
            if loop.time() > stop_at:
                raise
            await asyncio.sleep(0.05)


async def test_engine_serves_its_spiders_and_exits_0_on_sigterm(tmp_path: Path, site: str) -> None:
    port = free_port()
    proc = await spawn("--config", str(write_config(tmp_path, site, port)), token=TOKEN)
    base = f"http://127.0.0.1:{port}"
    async with stopped_at_exit(proc):
        async with aiohttp.ClientSession() as session:
            health = await get_json(session, f"{base}/netdiscovery/health")
            assert isinstance(health, dict)
            assert (health["status"], health["id"]) == ("ok", "cli-engine")
            spiders = await get_json(session, f"{base}/netdiscovery/spiders")
            assert isinstance(spiders, list)
            assert sorted(s["name"] for s in spiders) == ["one", "two"]
            headers = {"Authorization": f"Bearer {TOKEN}"}
            async with session.post(f"{base}/netdiscovery/spiders/one/pause") as response:
                assert response.status == 401
            url = f"{base}/netdiscovery/spiders/one/pause"
            async with session.post(url, headers=headers) as response:
                assert (response.status, (await response.json())["state"]) == (200, "paused")
            async with session.get(f"{base}/metrics") as response:
                text = await response.text()
            names = {f.name for f in text_string_to_metric_families(text)}
            assert {"netdisco_requests", "netdisco_spider_state"} <= names
        proc.send_signal(signal.SIGTERM)
        stdout, stderr = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 0, stderr.decode()
    output = (stdout + stderr).decode()
    assert "engine_stopped" in output
    assert TOKEN not in output


@pytest.mark.parametrize(
    ("settings", "args", "needle"),
    [
        ("concurrency = 0", (), "spiders[0].settings.concurrency"),
        ("concurrency = 2", ("--host", "0.0.0.0"), "engine.token_env"),
    ],
)
async def test_bad_config_fails_at_start_naming_the_key(
    tmp_path: Path, settings: str, args: tuple[str, ...], needle: str
) -> None:
    config = write_config(tmp_path, "http://127.0.0.1:9", free_port(), settings)
    proc = await spawn("--config", str(config), *args)
    async with stopped_at_exit(proc):
        _, stderr = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 2
    assert needle in stderr.decode()


async def read_until(stream: asyncio.StreamReader | None, needle: str, deadline: float = 30) -> str:
    """The lines up to the first that holds ``needle``; fails, with what was read, when the
    stream ends first (the engine exited) or after ``deadline`` s in all.

    It used to loop on ``wait_for(readline())``: at end of stream that loop never ended,
    and on Python 3.11 (whose wait_for swallows a cancel when the awaited call completes
    as it is cancelled) it took the test's cancel for a line: the event loop's teardown
    (``_cancel_all_tasks``) then spun on it for good.
    """
    assert stream is not None
    seen: list[str] = []
    async with asyncio.timeout(deadline):
        while True:
            line = (await stream.readline()).decode()
            if not line:
                raise AssertionError(f"output ended before {needle!r}:\n{''.join(seen)[-3000:]}")
            seen.append(line)
            if needle in line:
                return "".join(seen)


@contextlib.asynccontextmanager
async def hanging_engine(
    tmp_path: Path, site: str, deadline: float
) -> AsyncIterator[asyncio.subprocess.Process]:
    """An engine whose one request never completes; stop must wait ``deadline`` s for it.

    The engine is killed at exit whatever happens, also when it never gets ready."""
    (tmp_path / "spiders.py").write_text(SPIDERS.format(base=site))
    config = tmp_path / "engine.toml"
    config.write_text(
        f"[engine]\nport = {free_port()}\n[[spiders]]\n"
        f'spider = "{tmp_path}/spiders.py:Hang"\n'
        f"settings = {{ stop_deadline = {deadline}, timeout = 600, progress_interval = 0 }}\n"
    )
    proc = await spawn("--config", str(config))
    async with stopped_at_exit(proc):
        await read_until(proc.stderr, "engine_ready")
        yield proc


async def test_sigterm_cancels_in_flight_after_the_deadline_and_exits_0(
    tmp_path: Path, site: str
) -> None:
    async with hanging_engine(tmp_path, site, deadline=0.5) as proc:
        proc.send_signal(signal.SIGTERM)
        _, stderr = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 0, stderr.decode()
    assert '"spiders": {"hang": "stopped"}' in stderr.decode()


async def test_a_second_signal_forces_the_exit(tmp_path: Path, site: str) -> None:
    async with hanging_engine(tmp_path, site, deadline=600) as proc:
        proc.send_signal(signal.SIGTERM)
        await read_until(proc.stderr, "engine_stopping")
        proc.send_signal(signal.SIGINT)
        await asyncio.wait_for(proc.wait(), 30)
    assert proc.returncode == 130


@pytest.mark.timeout(180)
async def test_read_until_fails_when_the_output_ends_first() -> None:
    """An engine that exits before it is ready (say its port was taken meanwhile) fails
    the test at once, naming what it wrote; it once made the test spin until killed."""
    code = "import sys; sys.stderr.write('netdisco: error: port taken\\n')"
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", code, stderr=asyncio.subprocess.PIPE
    )
    async with stopped_at_exit(proc):
        with pytest.raises(AssertionError, match="port taken"):
            await read_until(proc.stderr, "engine_ready")
