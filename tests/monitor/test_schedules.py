"""Schedules of jobs on a real cluster: real ZooKeeper, two real monitors deciding the same
ticks, a real ``netdisco engine`` running what a schedule starts, and the real CLI."""

from __future__ import annotations

import asyncio
import itertools
import os
import sys
import time
from asyncio.subprocess import PIPE
from collections import Counter
from typing import Any

import aiohttp
import pytest

from monitor.daemon import Monitor
from netdisco.cluster.jobs import jobs_root
from netdisco.cluster.schedules import schedules_root
from netdisco.projects import archive
from netdisco.projects.store import ProjectStore
from netdisco.testing import eventually
from tests.monitor.conftest import Recorder, monitor_config
from tests.monitor.test_jobs import (  # noqa: F401 - fixtures
    PROJECT_SPIDER,
    TOKEN,
    Client,
    site,
    spawn_engine,
    state_of,
    with_token,
)

WALK = "tests.monitor.job_spiders:Walk"


class Schedules(Client):
    """The monitor's schedule routes, with the monitor token."""

    def __init__(self, monitor: Monitor, token: str = TOKEN) -> None:
        super().__init__(monitor, token)
        self.base = f"{monitor.http.url}/netdiscovery/monitor/schedules"

    async def add(self, **body: Any) -> dict[str, Any]:
        status, answer = await self.call("POST", "", body)
        assert status == 201, answer
        return dict(answer)

    async def listed(self) -> dict[str, dict[str, Any]]:
        status, answer = await self.call("GET")
        assert status == 200, answer
        return {s["id"]: s for s in answer["schedules"]}


def decided(*recorders: Recorder) -> list[tuple[str, float]]:
    return [
        (e.type.value, e.detail["tick"])
        for r in recorders
        for e in r.events
        if e.type.value in ("schedule_fired", "schedule_skipped")
    ]


async def test_two_monitors_decide_each_tick_once_and_skip_while_the_job_waits(
    zk_hosts, start_monitor
):
    first, rec1 = await start_monitor(with_token(monitor_config(zk_hosts)))
    second, rec2 = await start_monitor(with_token(monitor_config(zk_hosts)))
    made = await Schedules(first).add(spider=WALK, every="1h")
    assert (made["every"], made["enabled"], made["fired"]) == (3600.0, True, 0)
    assert made["next_run"] == (made["created_at"] // 3600 + 1) * 3600
    start = made["last_tick"]
    # both monitors look at the same instants, at once: ticks one hour apart (no engine,
    # so the first tick's job stays pending and every later tick is skipped)
    for hour in range(1, 6):
        now = start + hour * 3600 + 1
        await asyncio.gather(first.schedules.look(now), second.schedules.look(now))
    events = decided(rec1, rec2)
    assert [kind for kind, _ in events].count("schedule_fired") == 1
    assert [kind for kind, _ in events].count("schedule_skipped") == 4
    assert max(Counter(tick for _, tick in events).values()) == 1  # no tick twice
    (node,) = (await Schedules(second).listed()).values()
    assert (node["fired"], node["skipped"]) == (1, 4)
    jobs = await first.jobs.store.list()
    assert [j.id for j in jobs] == [node["last_job"]]
    assert (jobs[0].spider, jobs[0].state) == (WALK, "pending")
    fired = next(e for r in (rec1, rec2) for e in r.of("schedule_fired"))
    assert fired.detail["job"] == node["last_job"]
    assert fired.detail["schedule"] == node["id"]


async def test_a_schedule_runs_jobs_one_after_another_on_a_real_engine(
    zk_hosts,
    start_monitor,
    spawn_engine,  # noqa: F811 - the fixture
    site,  # noqa: F811 - the fixture
):
    monitor, rec = await start_monitor(with_token(monitor_config(zk_hosts)))
    _, rec2 = await start_monitor(with_token(monitor_config(zk_hosts)))
    await spawn_engine("e1")
    await eventually(lambda: monitor.jobs.slots(), "an engine with slots", timeout=30)
    client = Schedules(monitor)
    made = await client.add(spider=WALK, args={"site": site}, every=1)

    async def two_done() -> list[dict[str, Any]] | None:
        jobs = [j for j in (await Client(monitor).call("GET"))[1]["jobs"]]
        done = [j for j in jobs if j["state"] == "finished"]
        return jobs if len(done) >= 2 else None

    await eventually(two_done, "two scheduled jobs finished", timeout=60)
    status, answer = await client.call("PATCH", f"/{made['id']}", {"enabled": False})
    assert (status, answer["enabled"], answer["next_run"]) == (200, False, None)
    node = (await client.listed())[made["id"]]
    jobs = await monitor.jobs.store.list()
    assert node["fired"] == len(jobs) >= 2
    assert all(j.stats["succeeded"] == 200 for j in jobs if j.state == "finished")
    runs = sorted((j.started_at, j.ended_at) for j in jobs if j.started_at)
    for (_, ended), (started, _) in itertools.pairwise(runs):
        assert ended is not None
        assert started >= ended  # never two of a schedule's jobs at once
    total = node["fired"] + node["skipped"]
    await eventually(lambda: len(decided(rec, rec2)) == total, "each tick told once")
    # disabled: a look far in the future decides nothing
    before = len(decided(rec, rec2))
    await monitor.schedules.look(time.time() + 3600)
    assert len(decided(rec, rec2)) == before
    enabled_at = time.time()
    status, answer = await client.call("PATCH", f"/{made['id']}", {"enabled": True})
    assert answer["last_tick"] >= enabled_at  # ticks while disabled are not due
    status, answer = await client.call("DELETE", f"/{made['id']}")
    assert (status, answer) == (200, {"deleted": made["id"]})
    assert await client.listed() == {}
    assert len(await monitor.jobs.store.list()) == len(jobs)  # its jobs stay


async def _deploy(monitor: Monitor, tmp_path: Any) -> None:
    source = tmp_path / "shop"
    source.mkdir()
    (source / "pyproject.toml").write_text('[project]\nname = "shop"\nversion = "1"\n')
    (source / "shop_spiders.py").write_text(PROJECT_SPIDER)
    data = archive.pack(source)
    # a monitor started with fresh=False may not have connected yet
    await eventually(lambda: monitor.watcher.connected, "the monitor connected", timeout=30)
    store = ProjectStore(monitor.watcher.client, monitor.config.zookeeper.root)
    await store.put("shop", data, archive.inspect(data, 1 << 20), "1.0")


BAD = [
    ({"spider": WALK, "cron": "61 * * * *"}, "cron"),
    ({"spider": WALK, "cron": "0 0 30 2 *"}, "cron"),  # never fires
    ({"spider": WALK, "cron": "* " * 300}, "cron"),
    ({"spider": WALK, "cron": 5}, "cron"),
    ({"spider": WALK, "every": 0.5}, "every"),
    ({"spider": WALK, "every": "0s"}, "every"),
    ({"spider": WALK, "every": "400d"}, "every"),
    ({"spider": WALK, "every": 1e308 * 10}, "every"),
    ({"spider": WALK, "every": "soon"}, "every"),
    ({"spider": WALK, "every": True}, "every"),
    ({"spider": WALK}, "cron"),
    ({"spider": WALK, "every": 60, "cron": "* * * * *"}, "every"),
    ({"spider": WALK, "every": 60, "enabled": "yes"}, "enabled"),
    ({"spider": WALK, "every": 60, "on": "all"}, "on"),
    ({"spider": WALK, "every": 60, "when": "now"}, "when"),
    ({"spider": "../../etc", "every": 60}, "spider"),
    ({"spider": WALK, "every": 60, "args": {"a": 1}}, "args"),
    ({"project": "nope", "spider": "Titles", "every": 60}, "project"),
    ({"project": "Bad/Name", "spider": "Titles", "every": 60}, "project"),
    ({"project": "shop", "spider": "Nope", "every": 60}, "spider"),
    ({"project": "shop", "version": "9.9", "spider": "Titles", "every": 60}, "version"),
    ([], "body"),
]


async def test_bad_schedules_are_refused_naming_the_field_and_nothing_is_stored(
    zk_hosts, start_monitor, tmp_path
):
    monitor, _ = await start_monitor(with_token(monitor_config(zk_hosts)), fresh=False)
    await _deploy(monitor, tmp_path)
    client = Schedules(monitor)
    for body, field in BAD:
        status, answer = await client.call("POST", "", body)
        assert status == 400, (body, answer)
        assert answer["error"]["code"] == "invalid_schedule"
        assert answer["error"]["message"].startswith(f"{field}: "), (body, answer)
    status, answer = await Schedules(monitor, "wrong").call("POST", "", {"spider": WALK})
    assert status == 403
    async with (
        aiohttp.ClientSession(headers=client.headers) as s,
        s.post(client.base, data=b"{" + b" " * 70_000) as resp,
    ):
        assert resp.status == 413
    for method, path, body in (
        ("PATCH", "/0123456789ab", {"enabled": False}),
        ("DELETE", "/0123456789ab", None),
        ("DELETE", "/not-an-id", None),
    ):
        status, answer = await client.call(method, path, body)
        assert (status, answer["error"]["code"]) == (404, "unknown_schedule"), path
    assert await client.listed() == {}
    # a project's spider by class name, at a label: taken; a bad PATCH leaves it as it was
    made = await client.add(project="shop", version="1.0", spider="Titles", cron="0 3 * * *")
    assert made["request"]["project"] == "shop"
    for body in ({"enabled": "no"}, {"enabled": False, "cron": "* * * * *"}, [1]):
        status, answer = await client.call("PATCH", f"/{made['id']}", body)
        assert (status, answer["error"]["code"]) == (400, "invalid_schedule")
    assert (await client.listed())[made["id"]]["enabled"] is True
    # what another writer left under the root is skipped, never an error
    root = monitor.config.zookeeper.root
    zk = monitor.watcher.client
    await asyncio.to_thread(zk.create, f"{schedules_root(root)}/aaaaaaaaaaaa", b'{"cron": 1}')
    await asyncio.to_thread(zk.create, f"{schedules_root(root)}/not-an-id", b"{}")
    await asyncio.to_thread(zk.create, f"{schedules_root(root)}/bbbbbbbbbbbb", b"\xff" * 100)
    assert list(await client.listed()) == [made["id"]]
    await monitor.schedules.look(time.time() + 86400 * 2)  # its tick fires a job of shop
    (job,) = await monitor.jobs.store.list()
    assert (job.project, job.version, job.spider) == ("shop", "1.0", "Titles")
    assert await asyncio.to_thread(zk.exists, jobs_root(root))


async def test_the_cli_adds_lists_pauses_and_deletes_schedules(zk_hosts, start_monitor):
    monitor, _ = await start_monitor(with_token(monitor_config(zk_hosts)), fresh=False)
    env = {k: v for k, v in os.environ.items() if not k.startswith("NETDISCO_")}
    env["NETDISCO_MONITOR_TOKEN"] = TOKEN

    async def cli(*argv: str) -> tuple[int, str, str]:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "netdisco.cli", "jobs", "--monitor", monitor.http.url,
            "schedule", *argv, env=env, stdout=PIPE, stderr=PIPE,
        )  # fmt: skip
        out, err = await asyncio.wait_for(proc.communicate(), 60)
        return proc.returncode or 0, out.decode(), err.decode()

    code, out, _ = await cli("add", "-", WALK, "-a", "site=http://127.0.0.1:9", "--every", "2h")
    assert code == 0
    schedule_id = out.strip()
    listed = await Schedules(monitor).listed()
    assert listed[schedule_id]["every"] == 7200
    assert listed[schedule_id]["request"]["args"] == {"site": "http://127.0.0.1:9"}
    code, out, _ = await cli("list")
    assert code == 0
    assert schedule_id in out
    assert "every 7200s" in out
    assert f"{schedule_id} disabled" in (await cli("disable", schedule_id))[1]
    assert (await Schedules(monitor).listed())[schedule_id]["enabled"] is False
    assert f"{schedule_id} enabled" in (await cli("enable", schedule_id))[1]
    code, _, err = await cli("add", "-", WALK, "--cron", "not cron")
    assert code == 1
    assert "the monitor answered 400: cron: not a cron expression" in err
    assert f"{schedule_id} deleted" in (await cli("delete", schedule_id))[1]
    code, _, err = await cli("delete", schedule_id)
    assert (code, "answered 404" in err) == (1, True)
    assert await Schedules(monitor).listed() == {}


@pytest.mark.parametrize("every", [1, 7, 3600, 86400 * 366])
def test_every_ticks_are_epoch_multiples_and_the_due_one_is_the_latest(every: int) -> None:
    from netdisco.cluster.schedules import schedule_request

    made = schedule_request({"spider": WALK, "every": every}, now=1_000_000.5)
    assert made.due(1_000_000.5) is None  # nothing before its creation is due
    later = 1_000_000.5 + 10 * every + 0.25
    assert made.due(later) == (later // every) * every  # missed ticks are one, the latest
