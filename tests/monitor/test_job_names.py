"""Jobs named as Scrapyd users name them: a spider's ``name`` (or ``module:Class``), through
the CLI and the monitor's route, on real ZooKeeper, a real monitor and a real engine."""

from __future__ import annotations

import asyncio
import os
import sys
from asyncio.subprocess import PIPE
from pathlib import Path

from netdisco.testing import eventually
from tests.monitor.conftest import Recorder, monitor_config
from tests.monitor.test_jobs import (  # noqa: F401 - fixtures
    TOKEN,
    Client,
    site,
    spawn_engine,
    state_of,
    steering_engines,
    with_token,
)

SPIDERS = """from netdisco import Spider


class Small(Spider):
    name = "small"
    start_urls = ["http://127.0.0.1:9/"]


class Slow(Spider):
    name = "{slow}"
    start_urls = ["http://127.0.0.1:9/"]
"""


def project(directory: Path, slow: str = "slow") -> Path:
    (directory / "barproj").mkdir(parents=True)
    (directory / "barproj" / "__init__.py").write_text("")
    (directory / "barproj" / "spiders.py").write_text(SPIDERS.replace("{slow}", slow))
    (directory / "pyproject.toml").write_text('[project]\nname = "barproj"\nversion = "1"\n')
    return directory


async def cli(url: str, *argv: str) -> tuple[int, str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NETDISCO_")}
    env["NETDISCO_MONITOR_TOKEN"] = TOKEN
    where = ["--monitor", url] if argv[0] == "deploy" else []
    command = [*argv, *where] if where else ["jobs", "--monitor", url, *argv]
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "netdisco.cli", *command, env=env, stdout=PIPE, stderr=PIPE
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    return proc.returncode or 0, out.decode(), err.decode()


async def test_a_project_spider_is_named_by_its_name_and_names_are_unique(
    zk_hosts, start_monitor, tmp_path
):
    monitor, _ = await start_monitor(with_token(monitor_config(zk_hosts)))
    url = monitor.http.url
    code, _, err = await cli(url, "deploy", str(project(tmp_path / "twins", slow="small")))
    assert code != 0
    assert "barproj.spiders:Slow and barproj.spiders:Small are both named 'small'" in err
    assert await monitor.jobs.projects.projects() == []  # refused: nothing stored
    code, _, err = await cli(url, "deploy", str(project(tmp_path / "good")), "--version", "1.0")
    assert code == 0, err
    code, out, _ = await cli(url, "spiders", "barproj", "--version", "1.0")
    assert code == 0
    assert out.split() == ["NAME", "SPIDER", "slow", "barproj.spiders:Slow",
                           "small", "barproj.spiders:Small"]  # fmt: skip
    code, _, err = await cli(url, "spiders", "nothere")
    assert (code, "404" in err) == (1, True)  # the monitor refused: one line, exit 1
    # start by name through the CLI and the route; an unknown name lists the names
    code, out, err = await cli(url, "start", "barproj", "small")
    assert code == 0, err
    job = await monitor.jobs.store.get(out.strip())
    assert job is not None
    assert (job[0].project, job[0].spider) == ("barproj", "small")
    code, _, err = await cli(url, "start", "barproj", "fast")
    assert code == 1  # the monitor refused: one line, exit 1
    assert (
        "answered 400: spider: the project has no spider 'fast'; its spiders: "
        "slow (barproj.spiders:Slow), small (barproj.spiders:Small)"
    ) in err
    client = Client(monitor)
    assert len(await client.start(project="barproj", spider="slow")) == 1
    status, answer = await client.call("POST", "", {"project": "barproj", "spider": "Fast"})
    assert (status, answer["error"]["code"]) == (400, "invalid_job")
    assert "its spiders: slow (barproj.spiders:Slow), small" in answer["error"]["message"]
    assert len(await monitor.jobs.store.list()) == 2


async def test_a_job_of_no_project_names_a_spider_of_the_engines_spider_modules(
    zk_hosts,
    start_monitor,
    spawn_engine,  # noqa: F811 - the fixture
    site,  # noqa: F811 - the fixture
):
    monitor, _ = await steering_engines(zk_hosts, start_monitor, spawn_engine, e1={})
    rec = Recorder(monitor)
    code, out, err = await cli(monitor.http.url, "start", "-", "walk", "-a", f"site={site}")
    assert code == 0, err
    client = Client(monitor)
    done = await state_of(client, out.strip(), "finished", "failed")
    assert (done["state"], done["spider"]) == ("finished", "walk")  # as asked, to the end
    assert done["spider_class"] == "tests.monitor.job_spiders:Walk"

    def named() -> set[tuple[str, str]]:
        return {
            (e.type.value, e.detail["spider"])
            for e in rec.events
            if e.detail.get("job") == done["id"]
        }

    await eventually(lambda: len(named()) >= 2, "the job's events")
    assert named() == {("job_started", "walk"), ("job_finished", "walk")}, named()
    # what cannot run is refused at start, naming what exists; nothing is stored
    before = len(await monitor.jobs.store.list())
    code, out, err = await cli(monitor.http.url, "start", "-", "nope")
    assert (code, out) == (1, ""), err
    assert (
        "answered 400: spider: engine.spider_modules has no spider 'nope'; its spiders: "
        "crash (tests.monitor.job_spiders:Crash), walk (tests.monitor.job_spiders:Walk)"
    ) in err
    code, out, err = await cli(monitor.http.url, "start", "-", "walk", "--on", "engine-99")
    assert (code, out) == (1, ""), err
    assert (
        "answered 400: on: no engine 'engine-99' runs jobs in the cluster; "
        "the engines that run jobs: e1"
    ) in err
    code, _, err = await cli(monitor.http.url, "start", "-", "walk", "--on", "zone=mars")
    assert code == 1
    assert "no engine that runs jobs has the label zone=mars; the engines that run jobs: e1" in err
    assert len(await monitor.jobs.store.list()) == before
    # a job that fails says why in its log, where `jobs log` reads
    code, out, err = await cli(
        monitor.http.url, "start", "-", "walk", "-s", f"state_dir={os.devnull}"
    )
    assert code == 0, err
    failed = await state_of(client, out.strip(), "failed")
    code, log, err = await cli(monitor.http.url, "log", out.strip())
    assert code == 0, err
    assert "job_refused" in log, log
    assert failed["error"] in log.replace('\\"', '"'), (failed["error"], log)
