"""Rules on a clock, end to end: a real ``netdisco engine`` process whose spider blocks
its loop until the test releases it (a FIFO it reads), a real ZooKeeper, the real monitor.

The engine's watchdog writes ``stalled`` into its znode once; nothing else is read
while the loop is stuck (the status polls time out). The monitor must still report
``engine_stalled`` while the loop is stuck, once, and ``engine_recovered`` once after.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from netdisco.testing import eventually, free_port, get_json, serve
from tests.monitor.conftest import monitor_config

STALL_WAIT = 40.0  # a hang guard: how long a stall may take to be reported
SPIDER = """
import asyncio
import os
from netdisco import Request, Spider


class Blocking(Spider):
    name = "blocking"

    async def start(self):
        while not os.path.exists("go"):  # the test says go once the engine is registered
            await asyncio.sleep(0.05)
        yield Request("{base}/")

    def parse(self, response):
        open("blocking.started", "w").close()
        with open("release") as fifo:  # blocks the engine's loop until the test writes
            fifo.read()
        open("blocking.done", "w").close()
        yield {{"url": response.url}}
"""


def release(fifo: Path) -> None:
    """Open the FIFO the blocked callback reads, and close it: its read ends (EOF)."""
    os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))  # the reader is there: no wait


async def _registered(session: aiohttp.ClientSession, url: str) -> bool:
    body = await get_json(session, url)
    return bool(body and body.get("registry") == "registered")


async def page(_request: web.Request) -> web.Response:
    return web.Response(text="<html>ok</html>", content_type="text/html")


@pytest.mark.slow
@pytest.mark.timeout(120)
async def test_a_stuck_loop_is_reported_while_stuck(
    zk_hosts: str, start_monitor, tmp_path: Path
) -> None:
    app = web.Application()
    app.router.add_get("/", page)
    rules = {"grace": 30.0, "loop_grace": 1.0, "tick": 0.5}  # grace is not the loop's
    _monitor, rec = await start_monitor(
        monitor_config(zk_hosts, rules=rules, http={"poll_status": 0.5})
    )
    async with serve(app) as base:
        (tmp_path / "blocking.py").write_text(SPIDER.format(base=base))
        os.mkfifo(tmp_path / "release")  # opening it to read waits for a writer
        config = tmp_path / "engine.toml"
        port = free_port()
        config.write_text(
            f'[engine]\nid = "stuck"\nport = {port}\nloop_stall = 2.0\n'
            "loop_stall_drop = 0\n"  # the znode stays, stalled, and says nothing more
            f'[zookeeper]\nhosts = "{zk_hosts}"\nsession_timeout = 10.0\n'
            f'[[spiders]]\nspider = "blocking.py:Blocking"\n'
            "[spiders.settings]\nprogress_interval = 0\n"
        )
        env = {k: v for k, v in os.environ.items() if not k.startswith("NETDISCO_")}
        with (tmp_path / "engine.log").open("wb") as log:
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "netdisco.cli", "--log-json", "engine", "--config",
                str(config), cwd=tmp_path, env=env, stdout=log, stderr=log,
            )  # fmt: skip
        try:
            await eventually(lambda: rec.of("engine_joined", "stuck"), "joined", timeout=30)
            # and the engine has taken in its node's creation (the monitor may see the node
            # before the engine's loop has read the reply; its watchdog writes only after)
            async with aiohttp.ClientSession() as session:
                health = f"http://127.0.0.1:{port}/netdiscovery/health"
                await eventually(lambda: _registered(session, health), "registered", timeout=30)
            (tmp_path / "go").touch()
            started = tmp_path / "blocking.started"
            await eventually(started.exists, "the callback blocks", timeout=30)
            await eventually(
                lambda: rec.of("engine_stalled", "stuck"), "stalled", timeout=STALL_WAIT
            )
            # reported while stuck: the callback still blocks the loop (until released)
            assert not (tmp_path / "blocking.done").exists()
            release(tmp_path / "release")
            await eventually(lambda: rec.of("engine_recovered", "stuck"), timeout=30)
            async with aiohttp.ClientSession() as session:  # its loop serves again
                await eventually(lambda: _registered(session, health), "serving", timeout=30)
            assert (tmp_path / "blocking.done").exists()
            assert len(rec.of("engine_stalled", "stuck")) == 1
            assert len(rec.of("engine_recovered", "stuck")) == 1
            assert rec.of("engine_lost", "stuck") == []
        finally:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
