"""An application that embeds an engine registered in ZooKeeper, ended one of five ways.

    python -m tests.monitor.embedded_app MODE ZK_HOSTS ENGINE_ID

MODE: ``cancel`` (the task running ``engine.run()`` is cancelled), ``sigterm`` (an
aiohttp ``web.run_app`` whose ``cleanup_ctx`` starts and stops the engine),
``sigint`` (``asyncio.run`` of a ``main`` awaiting ``engine.run()``, Ctrl-C),
``async_with`` (the body of ``async with engine`` ends) and ``exception`` (that body
raises). It prints ``READY`` once registered; the first three modes end on a line
on stdin or the signal. Last it prints one JSON line: the netdisco or kazoo tasks
still there when the engine had ended, and, after the loop is closed, the threads
and sockets of the process.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from aiohttp import web

import netdisco
from netdisco import EngineSettings, Spider, SpiderEngine
from netdisco.testing import eventually

ROOTS = (str(Path(netdisco.__file__).parent), "kazoo")
report: dict[str, Any] = {}


class Idle(Spider):
    """Seeds nothing; kept alive, it waits for pushes: the engine runs until ended."""

    name = "idle"


def make_engine(zk_hosts: str, engine_id: str) -> SpiderEngine:
    settings = EngineSettings(id=engine_id, port=0)
    engine = SpiderEngine(settings, zookeeper={"hosts": zk_hosts, "session_timeout": 4.0})
    engine.add_spider(Idle, keep_alive=True)
    return engine


def ours(task: asyncio.Task[Any]) -> bool:
    """Whether a task runs netdisco's or kazoo's code (the app's own do not count)."""
    code = getattr(task.get_coro(), "cr_code", None)
    return code is not None and any(root in code.co_filename for root in ROOTS)


def record_tasks() -> None:
    left = [t for t in asyncio.all_tasks() if t is not asyncio.current_task() and ours(t)]
    report["tasks"] = sorted(t.get_name() for t in left)


async def registered(engine: SpiderEngine) -> None:
    await eventually(lambda: engine.registry_healthy is True, "registered", timeout=60)
    print("READY", flush=True)


async def line() -> None:
    """The next line of stdin, read on the loop (no thread)."""
    reader = asyncio.StreamReader()
    loop = asyncio.get_running_loop()
    transport, _ = await loop.connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader), sys.stdin
    )
    try:
        await reader.readline()
    finally:
        transport.close()


async def cancel(engine: SpiderEngine) -> None:
    task = asyncio.create_task(engine.run())
    await registered(engine)
    await line()
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        report["outcome"] = "cancelled"


async def in_async_with(engine: SpiderEngine, fail: bool) -> None:
    try:
        async with engine:
            await engine.start()
            await registered(engine)
            await line()
            if fail:
                raise RuntimeError("the application's own bug")
        report["outcome"] = "left"
    except RuntimeError:
        report["outcome"] = "raised"


async def until_sigint(engine: SpiderEngine) -> None:
    watch = asyncio.create_task(registered(engine))
    try:
        await engine.run()
    finally:
        watch.cancel()
        report["outcome"] = "interrupted"
        record_tasks()


def serve(engine: SpiderEngine) -> None:
    async def run_engine(app: web.Application) -> AsyncIterator[None]:
        await engine.start()
        watch = asyncio.create_task(registered(engine))
        yield
        watch.cancel()
        await engine.stop()
        report["outcome"] = "sigterm"
        record_tasks()

    app = web.Application()
    app.cleanup_ctx.append(run_engine)
    web.run_app(app, host="127.0.0.1", port=0, print=None)


async def main(mode: str, engine: SpiderEngine) -> None:
    if mode == "cancel":
        await cancel(engine)
    elif mode == "sigint":
        await until_sigint(engine)
    else:
        await in_async_with(engine, fail=mode == "exception")
    record_tasks()


def sockets() -> int:
    fds = Path("/proc/self/fd")
    links = []
    for fd in fds.iterdir():
        try:
            links.append(os.readlink(fd))
        except OSError:
            continue  # the directory's own descriptor, closed meanwhile
    return sum(link.startswith("socket:") for link in links)


def entry(argv: list[str]) -> None:
    import threading

    mode, zk_hosts, engine_id = argv
    engine = make_engine(zk_hosts, engine_id)
    if mode == "sigterm":
        serve(engine)
    else:
        try:
            asyncio.run(main(mode, engine))
        except KeyboardInterrupt:
            report.setdefault("outcome", "interrupted")
    report["engine"] = str(engine.state)
    report["threads"] = sorted(t.name for t in threading.enumerate() if t.name != "MainThread")
    report["sockets"] = sockets()
    print(json.dumps(report), flush=True)


if __name__ == "__main__":
    entry(sys.argv[1:])
