"""Jobs on a real cluster: real ZooKeeper, a real monitor and two real ``netdisco engine``
processes, each job a child process of its engine."""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import redis.asyncio as aioredis
from aiohttp import web

from monitor.daemon import Monitor
from monitor.settings import ControlSettings
from netdisco.frontiers.redis import RedisOptions
from netdisco.testing import eventually, serve
from tests.monitor.conftest import SpawnEngine, monitor_config
from tests.monitor.test_dashboard import shows
from tests.monitor.test_http import CHROMIUM, chromium
from tests.netdisco.conftest import redis_server, redis_url  # noqa: F401 - fixtures
from tests.netdisco.engine_site import page, robots, start_site

TOKEN = "monitor-secret"
Spawn = Callable[..., Awaitable[asyncio.subprocess.Process]]


@pytest.fixture
async def site() -> AsyncIterator[str]:
    runner, base = await start_site()
    yield base
    await runner.cleanup()


@pytest.fixture
def spawn_engine(spawn_engine: SpawnEngine, tmp_path: Path) -> Spawn:
    """The suite's engine processes, with jobs: ``max_jobs``, ``labels``, this module's
    spiders, and job and feed folders in the test's directory."""

    async def spawn(engine_id: str, **more: Any) -> asyncio.subprocess.Process:
        (tmp_path / "feeds").mkdir(exist_ok=True)
        keys: dict[str, Any] = {
            "max_jobs": 2,
            "spider_modules": ["tests.monitor.job_spiders"],
            "jobs_dir": str(tmp_path / engine_id),
            "feeds_dir": str(tmp_path / "feeds"),
        }
        process: asyncio.subprocess.Process = await spawn_engine(engine_id, **{**keys, **more})
        return process

    return spawn


def with_token(config: Any) -> Any:
    return replace(config, control=ControlSettings(token=TOKEN))


class Client:
    """The monitor's job routes, with the monitor token."""

    def __init__(self, monitor: Monitor, token: str = TOKEN) -> None:
        self.base = f"{monitor.http.url}/netdiscovery/monitor/jobs"
        self.headers = {"Authorization": f"Bearer {token}"}

    async def call(self, method: str, path: str = "", body: Any = None) -> tuple[int, Any]:
        async with (
            aiohttp.ClientSession(headers=self.headers) as s,
            s.request(method, self.base + path, json=body) as resp,
        ):
            return resp.status, await resp.json()

    async def start(self, **body: Any) -> list[dict[str, Any]]:
        status, answer = await self.call("POST", "", body)
        assert status == 201, answer
        return list(answer["jobs"])

    async def job(self, job_id: str) -> dict[str, Any]:
        status, answer = await self.call("GET", f"/{job_id}")
        assert status == 200, answer
        return dict(answer)

    async def log(self, job_id: str, **params: str) -> str:
        async with (
            aiohttp.ClientSession(headers=self.headers) as s,
            s.get(f"{self.base}/{job_id}/log", params=params) as resp,
        ):
            assert resp.status == 200, await resp.text()
            return await resp.text()


async def steering_engines(
    zk_hosts: str, start_monitor: Any, spawn_engine: Any, **engines: dict[str, Any]
) -> tuple[Monitor, Client]:
    """A monitor with the token and ``engines`` (id -> engine settings), once it sees
    every engine's job slots."""
    monitor, _ = await start_monitor(with_token(monitor_config(zk_hosts)))
    for engine_id, settings in engines.items():
        await spawn_engine(engine_id, **settings)
    count = len(engines)
    await eventually(lambda: len(monitor.jobs.slots()) == count, "the engines' slots", timeout=30)
    return monitor, Client(monitor)


async def state_of(
    client: Client, job_id: str, *states: str, timeout: float = 30
) -> dict[str, Any]:
    found: dict[str, Any] = {}

    async def check() -> bool:
        found.update(await client.job(job_id))
        return found["state"] in states

    await eventually(check, f"job {job_id} {'/'.join(states)}", timeout=timeout)
    return found


async def two_engines(zk_hosts: str, start_monitor: Any, spawn: Spawn) -> tuple[Monitor, Any]:
    monitor, rec = await start_monitor(with_token(monitor_config(zk_hosts)))
    await spawn("e1", labels=["zone=a"])
    await spawn("e2", labels=["zone=b"])
    await eventually(lambda: len(monitor.jobs.slots()) == 2, "two engines", timeout=30)
    return monitor, rec


async def test_jobs_placed_logged_cancelled_and_kept(
    zk_hosts, start_monitor, spawn_engine, site, tmp_path
):
    monitor, rec = await two_engines(zk_hosts, start_monitor, spawn_engine)
    client = Client(monitor)
    walk = {"spider": "tests.monitor.job_spiders:Walk", "args": {"site": site}}
    # wrong token: refused, nothing stored
    status, answer = await Client(monitor, "wrong").call("POST", "", walk)
    assert (status, answer["error"]["code"]) == (403, "forbidden")
    # a label, a named engine, then "any" and "all"
    (on_b,) = await client.start(**walk, on="zone=b")
    (on_e1,) = await client.start(**walk, on=["e1"], settings={"feeds": {"items.jsonl": {}}})
    done_b = await state_of(client, on_b["id"], "finished")
    done_e1 = await state_of(client, on_e1["id"], "finished")
    assert (done_b["engine"], done_e1["engine"]) == ("e2", "e1")
    assert done_e1["stats"]["succeeded"] == 200
    assert done_e1["feeds"][0]["items"] == 200
    page = await client.call("GET", f"/{on_e1['id']}/items?offset=10&limit=5")
    assert page[0] == 200
    assert len(page[1]["items"]) == 5
    everywhere = await client.start(**walk, on="all")
    assert sorted(j["on"][0] for j in everywhere) == ["e1", "e2"]
    ended = [await state_of(client, j["id"], "finished") for j in everywhere]
    assert sorted(j["engine"] for j in ended) == ["e1", "e2"]
    # a slow job: its log is read while it runs, then it is cancelled
    slow = {**walk, "args": {"site": site, "speed": "slow"},
            "settings": {"concurrency": "1", "download_delay": "0.1"}}  # fmt: skip
    (running,) = await client.start(**slow)
    await state_of(client, running["id"], "running")

    async def crawling() -> str | None:
        text = await client.log(running["id"], tail="50")
        return text if '"job_running"' in text else None

    text = await eventually(crawling, "the running job's log", timeout=30)
    assert "job_stopping" not in text
    placed_on = (await client.job(running["id"]))["engine"]
    engine = next(m for m in monitor.watcher.members() if m.name == placed_on)
    url = engine.payload.status_url or ""
    async with aiohttp.ClientSession() as s:
        async with s.get(url.replace("/engine", "/spiders")) as resp:
            listed = [x for x in await resp.json() if x.get("job") == running["id"]]
        async with s.get(url.replace("/netdiscovery/engine", "/metrics")) as resp:
            metrics = await resp.text()
    assert listed[0]["state"] == "running"
    assert f'netdisco_scheduled_requests_total{{spider="job-{running["id"]}"}}' in metrics
    assert "netdisco_jobs_running 1.0" in metrics
    status, answer = await client.call("POST", f"/{running['id']}/cancel")
    assert status == 200
    assert answer["cancel"] is True
    follow = asyncio.create_task(client.log(running["id"], tail="1000", follow="1"))
    cancelled = await state_of(client, running["id"], "cancelled")
    assert "job_stopping" in await asyncio.wait_for(follow, 20)  # the stream ends with the job
    assert 0 < cancelled["stats"]["succeeded"] < 200
    await eventually(lambda: rec.of("job_cancelled"), "job_cancelled, reported")
    assert [e.detail["job"] for e in rec.of("job_cancelled")] == [running["id"]]
    assert len(rec.of("job_finished")) == 4
    # a crashing spider fails its job, not its engine
    (crash,) = await client.start(spider="tests.monitor.job_spiders:Crash", args={"site": site})
    failed = await state_of(client, crash["id"], "failed")
    assert failed["exit_status"] == 3
    assert len(monitor.jobs.slots()) == 2
    # another monitor (or this one restarted) sees the same jobs
    other, _ = await start_monitor(with_token(monitor_config(zk_hosts)))
    await eventually(lambda: len(other.jobs.jobs) == 6, "the second monitor lists the jobs")
    assert {j: s.state for j, s in other.jobs.jobs.items()} == {
        j: s.state for j, s in monitor.jobs.jobs.items()
    }


class HeldSite:
    """``engine_site``'s pages, of which only the first ``free`` are served at once: the
    later ones wait until ``release`` (so a job is surely mid-crawl, whatever the load)."""

    def __init__(self, free: int) -> None:
        self.free = free
        self.served = 0
        self.held = 0
        self.release = asyncio.Event()

    async def page(self, request: web.Request) -> web.StreamResponse:
        if self.served >= self.free and not self.release.is_set():
            self.held += 1
            with contextlib.suppress(TimeoutError):  # a broken run still ends
                await asyncio.wait_for(self.release.wait(), 60)
        self.served += 1
        return await page(request)

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/{speed:fast|slow}/p/{number:\\d+}", self.page)
        app.router.add_get("/robots.txt", robots)
        return app


async def acknowledged(frontier: str) -> int:
    """Requests of the crawls under the frontier URL's prefix acknowledged in Redis:
    seen, and no longer queued or leased (their JSON goes with the ack)."""
    options = RedisOptions.from_url(frontier)
    client = aioredis.Redis.from_url(options.url)
    try:
        done = 0
        async for key in client.scan_iter(match=f"{options.prefix}:*:req"):
            seen = key.decode().removesuffix(":req") + ":seen"
            done += await client.scard(seen) - await client.hlen(key)
        return done
    finally:
        await client.aclose()


async def test_job_on_a_killed_engine_is_lost_requeued_and_finished(
    zk_hosts,
    start_monitor,
    spawn_engine,
    redis_url,  # noqa: F811 - the fixture
):
    monitor, rec = await start_monitor(with_token(monitor_config(zk_hosts)))
    held = HeldSite(free=3)  # e1 fetches 3 pages, then waits on the 4th until it is killed
    async with serve(held.app()) as site:
        first = await spawn_engine("e1", job_frontier=redis_url)
        await eventually(lambda: len(monitor.jobs.slots()) == 1, "one engine", timeout=30)
        client = Client(monitor)
        walk = {"spider": "tests.monitor.job_spiders:Walk", "on_lost": "requeue",
                "args": {"site": site},
                "settings": {"concurrency": "1", "depth_limit": "5"}}  # fmt: skip
        (job,) = await client.start(**walk)
        await state_of(client, job["id"], "running")
        await spawn_engine("e2", job_frontier=redis_url)
        await eventually(lambda: len(monitor.jobs.slots()) == 2, "the second engine", timeout=30)
        # e1 is mid-crawl (a page held) and its pages so far are acknowledged: the resume
        # must not fetch them again
        await eventually(lambda: held.held, "e1 waiting on a page", timeout=30)
        await eventually(
            lambda: _equals(acknowledged(redis_url), held.free), "e1's acks", timeout=30
        )
        first.send_signal(signal.SIGKILL)
        await first.wait()
        await eventually(lambda: rec.of("job_lost"), "the job lost with its engine", timeout=20)
        held.release.set()  # the page e1 held, and the rest, for e2
        done = await state_of(client, job["id"], "finished", timeout=60)
    assert (done["engine"], done["attempts"]) == ("e2", 2)
    # resumed: none of the pages e1 had acknowledged is fetched again (e1's job process,
    # orphaned, may still finish the page it held: then e2 has one fewer to fetch)
    assert 0 < done["stats"]["succeeded"] <= 63 - held.free


async def _equals(value: Awaitable[int], wanted: int) -> bool:
    return await value == wanted


@pytest.mark.browser
@pytest.mark.timeout(180)  # Chromium's first start on a loaded machine
@pytest.mark.skipif(not CHROMIUM.exists(), reason="/usr/bin/chromium absent")
async def test_jobs_page_starts_follows_and_cancels_a_job(
    zk_hosts, start_monitor, spawn_engine, site, tmp_path
):
    config = replace(monitor_config(zk_hosts), control=ControlSettings())  # loopback, no token
    monitor, rec = await start_monitor(config)
    await spawn_engine("e1")
    await eventually(lambda: monitor.jobs.slots(), "an engine with slots", timeout=30)
    args = json.dumps({"site": site, "speed": "slow"})
    settings = json.dumps({"concurrency": "1", "download_delay": "0.1"})
    async with chromium(f"{monitor.http.url}/jobs", tmp_path / "profile") as page:
        await shows(page, "document.querySelector('#start-button') !== null", "the form")
        await page.eval(
            "document.querySelector('#spider').value = 'tests.monitor.job_spiders:Walk';"
            f"document.querySelector('#args').value = {json.dumps(args)};"
            f"document.querySelector('#settings').value = {json.dumps(settings)};"
            "document.querySelector('#start-button').click(); true"
        )
        log = "document.querySelector('#log').textContent"
        await shows(page, f"{log}.includes('job_running')", "the job's log, followed live")
        (job_id,) = monitor.jobs.jobs
        cancel = f"document.querySelector(\"tr[data-job='{job_id}'] button.cancel\")"
        await shows(page, f"{cancel} !== null", "the Cancel button")
        await page.eval(f"{cancel}.click(); true")
        state = f"document.querySelector(\"tr[data-job='{job_id}'] .state\").textContent"
        assert await shows(page, f"{state} === 'cancelled' && {state}", "cancelled") == "cancelled"
        await shows(page, f"{log}.includes('job_stopping')", "the stop, in the log")
    await eventually(lambda: rec.of("job_cancelled"), "job_cancelled, reported")
    assert [e.detail["job"] for e in rec.of("job_cancelled")] == [job_id]


PROJECT_SPIDER = """
from netdisco import Request, Spider


class Titles(Spider):
    name = "titles"
    site = ""

    async def start(self):
        yield Request(f"{self.site}/fast/p/0", callback=self.parse)

    def parse(self, response):
        yield {"title": response.css("h1::text").get()}
        for href in response.css("a::attr(href)").getall():
            yield response.follow(href, callback=self.parse)
"""


async def test_a_job_of_a_deployed_project_runs_in_its_venv(
    zk_hosts, start_monitor, spawn_engine, site, tmp_path
):
    from netdisco.projects import archive
    from netdisco.projects.store import ProjectStore

    source = tmp_path / "shop"
    source.mkdir()
    (source / "pyproject.toml").write_text('[project]\nname = "shop"\nversion = "1"\n')
    (source / "shop_spiders.py").write_text(PROJECT_SPIDER)
    data = archive.pack(source)
    monitor, _ = await start_monitor(with_token(monitor_config(zk_hosts)))
    store = ProjectStore(monitor.watcher.client, monitor.config.zookeeper.root)
    version, _ = await store.put("shop", data, archive.inspect(data, 1 << 20), None)
    await spawn_engine("e1")
    await eventually(lambda: monitor.jobs.slots(), "an engine with slots", timeout=30)
    client = Client(monitor)
    (job,) = await client.start(project="shop", spider="titles", args={"site": site})
    done = await state_of(client, job["id"], "finished", "failed", timeout=180)
    assert done["state"] == "finished", done["error"]
    assert (done["spider"], done["version"]) == ("titles", version.id)  # the name asked
    assert done["spider_class"] == "shop_spiders:Titles"
    assert done["stats"]["items"] == 200
    status, refused = await client.call("POST", "", {"project": "shop", "spider": "nope"})
    assert status == 400
    assert refused["error"]["message"].endswith(
        "no spider 'nope'; its spiders: titles (shop_spiders:Titles)"
    )


async def test_job_history_keeps_the_newest_ended_jobs_and_none_too_old(zk_hosts, start_monitor):
    from netdisco.cluster.jobs import Job, JobState, new_id

    config = monitor_config(zk_hosts, jobs={"history": 2, "history_days": 1})
    monitor, _ = await start_monitor(with_token(config))
    now = time.time()

    def ended(state: JobState, age: float, **more: Any) -> Job:
        return Job(id=new_id(), spider="s", state=state, created_at=now - age - 1,
                   ended_at=now - age, **more)  # fmt: skip

    newest = ended(JobState.FINISHED, 10)
    second = ended(JobState.FAILED, 20)
    third = ended(JobState.CANCELLED, 30)  # beyond the count of 2
    lost = ended(JobState.LOST, 5)  # lost for good (no requeue): history too
    requeued = ended(JobState.LOST, 5, on_lost="requeue")  # to be placed again: kept
    waiting = Job(id=new_id(), spider="s", created_at=now - 5 * 86400)  # old, not ended: kept
    old = ended(JobState.FINISHED, 2 * 86400)
    for job in (newest, second, third, lost, requeued, waiting, old):
        await monitor.jobs.store.create(job)
    monitor.jobs.wake()

    async def pruned() -> set[str] | None:
        left = {j.id for j in await monitor.jobs.store.list()}
        return left if len(left) == 4 else None

    left = await eventually(pruned, "the history pruned", timeout=10)
    assert left == {newest.id, lost.id, requeued.id, waiting.id}
