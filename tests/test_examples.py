"""examples/: each one run against real servers on loopback, and the TOML files checked key by key.

mypy type-checks examples/ through pyproject's ``files`` list (``make typecheck``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from kazoo.client import KazooClient

from examples import embed_aiohttp, sqlite_items
from monitor import config as monitor_config
from monitor.hooks import resolve
from netdisco.cluster.settings import ENGINE_KEYS, ZooKeeperSettings
from netdisco.crawl.settings import Settings
from netdisco.demo.site import ITEMS_ENV, SITE_ENV, SmtpSink, start_site
from netdisco.engine import SpiderEngine
from netdisco.engine.config import EngineSettings, load_config
from netdisco.testing import eventually, free_port

from .netdisco import engine_site

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"


@pytest.fixture
async def demo_site() -> AsyncIterator[str]:
    """The demo website: pages with titles, 50-240 ms each."""
    runner, base = await start_site()
    yield base
    await runner.cleanup()


@pytest.fixture
async def fast_site() -> AsyncIterator[str]:
    """200 pages without a <title>, answered at once."""
    runner, base = await engine_site.start_site()
    yield base
    await runner.cleanup()


def test_every_example_imports_and_the_monitor_example_hook_loads() -> None:
    """Importing an example runs nothing (each guards its main); the hook the example
    monitor.toml names is a callable the monitor can load and call with an event."""
    import importlib

    for path in sorted(EXAMPLES.glob("*.py")):
        if path.stem != "__init__":
            importlib.import_module(f"examples.{path.stem}")
    settings = monitor_config.load_config(EXAMPLES / "monitor.toml", env={}).callable
    assert settings is not None
    assert callable(resolve(settings.target))


# -- TOML examples: every key the code reads, each with a comment ----------------------

KEY_LINE = re.compile(r"^#?\s*([a-z_]+)\s*=\s*(.*)$")


def documented_keys(path: Path) -> dict[str, set[str]]:
    """section -> keys written in the file (active or commented out), each with a comment."""
    keys: dict[str, set[str]] = {}
    section = ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        header = re.match(r"^\[+([a-z_.]+)\]+", line)
        if header:
            section = header.group(1)
            continue
        match = KEY_LINE.match(line)
        if match is None:
            continue
        key, rest = match.groups()
        assert re.search(r"\s#\s*\S", rest), f"{path.name}: [{section}] {key} has no comment"
        keys.setdefault(section, set()).add(key)
    return keys


def field_names(cls: Any, *, minus: tuple[str, ...] = ()) -> set[str]:
    return {f.name for f in dataclasses.fields(cls)} - set(minus)


def test_engine_toml_shows_every_key_with_a_comment() -> None:
    keys = documented_keys(EXAMPLES / "engine.toml")
    assert keys["engine"] == field_names(EngineSettings, minus=("token",))  # token: env only
    assert keys["zookeeper"] == set(ENGINE_KEYS) <= field_names(ZooKeeperSettings)
    assert keys["spiders"] == {"spider", "schedule", "every"}
    assert keys["spiders.settings"] == field_names(Settings)


def test_monitor_toml_shows_every_key_with_a_comment() -> None:
    keys = documented_keys(EXAMPLES / "monitor.toml")
    schema = monitor_config.schema()  # what the monitor reads, section by section
    assert {section: set(names) for section, names in schema.items()} == keys


async def test_engine_toml_loads_and_crawls(
    zk_hosts: str, demo_site: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The file as it is, but on the test's ZooKeeper and a free port."""
    monkeypatch.setenv(SITE_ENV, demo_site)
    monkeypatch.setenv(ITEMS_ENV, str(tmp_path))
    monkeypatch.setenv("NETDISCO_TOKEN", "tok-examples-0123456789")  # the file names it
    config = load_config(EXAMPLES / "engine.toml", overrides={"port": 0}, pairs={"max_pages": "40"})
    config = dataclasses.replace(config, zookeeper={**(config.zookeeper or {}), "hosts": zk_hosts})
    engine = SpiderEngine.from_config(config)
    await engine.start()
    try:
        znode = await eventually(
            lambda: asyncio.to_thread(read_znode, zk_hosts, "/netdiscovery/engine-1"),
            "the engine's znode",
        )
        states = await asyncio.wait_for(engine.wait(), 30)
    finally:
        await engine.stop()
    assert znode["id"] == "engine-1"
    assert {name: str(state) for name, state in states.items()} == {"shop": "finished"}
    lines = (tmp_path / "shop.jsonl").read_text().splitlines()
    assert 40 <= len(lines) <= 40 + 16  # max_pages, plus what was in flight
    assert all(json.loads(line)["title"].startswith("Shop page") for line in lines)


def read_znode(hosts: str, path: str) -> dict[str, Any] | None:
    """The node's JSON data, or None while it does not exist."""
    client = KazooClient(hosts=hosts)
    client.start(timeout=15)
    try:
        found = client.exists(path)
        data = client.get(path)[0] if found else None
    finally:
        client.stop()
        client.close()
    return None if data is None else dict(json.loads(data))


# -- sqlite_items.py --------------------------------------------------------------------


async def test_sqlite_example_writes_batches(demo_site: str, tmp_path: Path) -> None:
    settings = Settings(max_pages=120, concurrency=16, per_host_concurrency=16)
    rows = await sqlite_items.crawl(f"{demo_site}/docs/0", tmp_path / "items.db", settings)
    assert 120 <= rows <= 120 + 16


async def test_sqlite_example_filters_pages_without_a_title(fast_site: str, tmp_path: Path) -> None:
    rows = await sqlite_items.crawl(f"{fast_site}/fast/p/0", tmp_path / "items.db")
    assert rows == 0  # 200 pages crawled, none with a <title>: the filter operator dropped all


async def test_sqlite_pipeline_groups_rows_in_batches(tmp_path: Path) -> None:
    from reactivex.subject import Subject

    pipeline = sqlite_items.SqlitePipeline(tmp_path / "items.db", batch=10)
    await pipeline.open()
    source: Subject[dict[str, Any]] = Subject()
    stream: Any = source
    for operator in pipeline.operators:
        stream = operator(stream)
    stream.subscribe(pipeline.process)
    for n in range(25):
        source.on_next({"url": f"http://127.0.0.1/{n}", "title": f" page {n} ", "links": n})
    source.on_next({"url": "http://127.0.0.1/untitled", "title": None, "links": 0})
    source.on_completed()
    await pipeline.close()
    assert pipeline.batches == 3  # 10 + 10 + the last 5, flushed on completion
    db = __import__("sqlite3").connect(tmp_path / "items.db")
    assert db.execute("SELECT COUNT(*), MIN(title) FROM pages").fetchone() == (25, "page 0")
    db.close()


# -- embed_aiohttp.py -------------------------------------------------------------------


async def test_embedded_engine_serves_inside_the_application(demo_site: str) -> None:
    runner = web.AppRunner(embed_aiohttp.make_app(f"{demo_site}/shop/0", token="s3cret"))
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    app_url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    try:
        async with aiohttp.ClientSession() as session:
            async with session.post(f"{app_url}/crawl", json={"url": f"{demo_site}/blog/0"}) as r:
                assert (r.status, await r.json()) == (202, {"accepted": 1})

            async def both_sections() -> dict[str, str] | None:
                async with session.get(f"{app_url}/titles") as response:
                    found: dict[str, str] = await response.json()
                sections = {url.split("/")[3] for url in found}
                return found if len(found) >= 30 and sections == {"shop", "blog"} else None

            found = await eventually(both_sections, "titles from both sections")
            assert found[f"{demo_site}/shop/0"] == "shop 0"
            async with session.get(f"{app_url}/crawler/netdiscovery/spiders/titles") as response:
                status = await response.json()
            assert status.get("state") == "running", status
            assert status["succeeded"] >= 30
            async with session.post(f"{app_url}/crawler/netdiscovery/spiders/titles/pause") as r:
                assert r.status == 401  # the mounted control routes still want the token
    finally:
        await runner.cleanup()  # the cleanup_ctx stops the engine


# -- offline_hook.py, through the real monitor running examples/monitor.toml -------------


class Receivers:
    """A webhook endpoint and an SMTP sink, both in the test's loop."""

    def __init__(self) -> None:
        self.hooks: list[dict[str, Any]] = []
        self.sink = SmtpSink()
        self.runner: web.AppRunner | None = None
        self.url = ""

    async def start(self) -> None:
        async def hook(request: web.Request) -> web.Response:
            self.hooks.append(await request.json())
            return web.Response(status=204)

        app = web.Application()
        app.router.add_post("/hook", hook)
        self.runner = web.AppRunner(app, access_log=None)
        await self.runner.setup()
        await web.TCPSite(self.runner, "127.0.0.1", 0).start()
        self.url = f"http://127.0.0.1:{self.runner.addresses[0][1]}/hook"
        await self.sink.start()

    async def subjects_until(self, word: str) -> list[str]:
        """Subjects of the mails received, up to the first one that contains ``word``."""
        subjects: list[str] = []
        while not any(word in subject for subject in subjects):
            mail = await self.sink.mails.get()
            subjects.append(str(mail.message["Subject"]))
        return subjects

    async def stop(self) -> None:
        await self.sink.stop()
        if self.runner is not None:
            await self.runner.cleanup()


@pytest.fixture
async def receivers() -> AsyncIterator[Receivers]:
    result = Receivers()
    await result.start()
    yield result
    await result.stop()


def spawn(argv: list[str], cwd: Path, env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as handle:
        return subprocess.Popen(
            argv, cwd=cwd, env=env, stdout=handle, stderr=subprocess.STDOUT, start_new_session=True
        )


def stop(process: subprocess.Popen[bytes]) -> int:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    return process.returncode


def monitor_env(receivers: Receivers, tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NETDISCO_")}
    return env | {
        "PYTHONPATH": str(ROOT),  # the callable hook is examples.offline_hook
        "INCIDENT_LOG": str(tmp_path / "incidents.jsonl"),
        "NETDISCO_MONITOR_EMAIL_PORT": str(receivers.sink.port),
        "NETDISCO_MONITOR_WEBHOOK_URL": receivers.url,
        "NETDISCO_MONITOR_ALERTS_BATCH_WINDOW": "0.2",
        "NETDISCO_MONITOR_LOG_JSON": "true",
    }


async def healthy(session: aiohttp.ClientSession, port: int) -> bool:
    try:
        async with session.get(f"http://127.0.0.1:{port}/netdiscovery/health") as response:
            return response.status == 200
    except aiohttp.ClientError:
        return False


def start_engine(tmp_path: Path, zk_hosts: str, env: dict[str, str]) -> subprocess.Popen[bytes]:
    """An engine without spiders, registered with a 2 s session: the one to be killed."""
    engine_config = tmp_path / "engine.toml"
    engine_config.write_text(
        f'[engine]\nid = "doomed"\nport = {free_port()}\n'
        f'[zookeeper]\nhosts = "{zk_hosts}"\nsession_timeout = 2.0\n'
    )
    argv = [sys.executable, "-m", "netdisco.cli", "engine", "--config", str(engine_config)]
    return spawn(argv, tmp_path, env, tmp_path / "engine.log")


async def test_monitor_example_runs_every_hook_for_a_lost_engine(
    zk_hosts: str, receivers: Receivers, tmp_path: Path
) -> None:
    port = free_port()
    monitor = spawn(
        [sys.executable, "-m", "monitor.cli", "--config", str(EXAMPLES / "monitor.toml"),
         "--zk", zk_hosts, "--port", str(port), "--grace", "0.5"],
        tmp_path, monitor_env(receivers, tmp_path), tmp_path / "monitor.log",
    )  # fmt: skip
    engine: subprocess.Popen[bytes] | None = None
    try:
        async with aiohttp.ClientSession() as session:
            # an engine that registers before the monitor's first listing is part of its
            # silent baseline, not an engine_joined: wait until the monitor is ready
            await eventually(lambda: healthy(session, port), "the monitor's health")
            engine = start_engine(tmp_path, zk_hosts, monitor_env(receivers, tmp_path))
            events_url = f"http://127.0.0.1:{port}/netdiscovery/events"

            async def event(kind: str) -> bool:
                try:
                    async with session.get(events_url) as response:
                        body = await response.json()
                except aiohttp.ClientError:
                    return False
                return any(e["type"] == kind for e in body["events"])

            await eventually(lambda: event("engine_joined"), "engine_joined")
            engine.kill()
            engine.wait()
            await eventually(lambda: event("engine_lost"), "engine_lost")
            incidents = tmp_path / "incidents.jsonl"
            await eventually(incidents.exists, "the callable hook's incident line")
            subjects = await asyncio.wait_for(receivers.subjects_until("engine_lost"), 30)
            await eventually(lambda: receivers.hooks, "the webhook")
            await eventually((tmp_path / "lost-engines.jsonl").exists, "the command hook")
    finally:
        if engine is not None:
            stop(engine)
        code = stop(monitor)
    incident = json.loads(incidents.read_text().splitlines()[0])
    assert (incident["event"], incident["engine_id"]) == ("engine_lost", "doomed")
    assert incident["verdict"].startswith("unreachable")  # SIGKILLed: nothing answers
    assert "[netdisco] engine_lost: doomed" in subjects  # cluster_empty may come first
    assert receivers.hooks[0]["type"] == "engine_lost"
    command = json.loads((tmp_path / "lost-engines.jsonl").read_text().splitlines()[0])
    assert command["engine_id"] == "doomed"
    assert code == 0, (tmp_path / "monitor.log").read_text()


def test_embedded_example_refuses_an_open_control_off_loopback(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("NETDISCO_TOKEN", raising=False)
    with pytest.raises(SystemExit) as exited:
        embed_aiohttp.main(["http://127.0.0.1:1/", "--host", "0.0.0.0"])
    assert exited.value.code == 2
    assert "set NETDISCO_TOKEN" in capsys.readouterr().err
