"""Scrapyd's own tools against a real monitor, engine and ZooKeeper: ``scrapyd-deploy`` uploads
a ``scrapy startproject`` project unchanged but for its deploy URL, scrapyd-client's
``ScrapydClient`` and command line schedule, list, cancel and delete, and a job's log
and items are read at Scrapyd's paths; each answer has the shape Scrapyd 1.6 documents."""

from __future__ import annotations

import asyncio
import base64
import io
import json
import os
import shutil
import signal
import zipfile
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from monitor.daemon import Monitor
from monitor.settings import ControlSettings
from netdisco.cluster.jobs import is_job_id
from netdisco.testing import eventually
from tests.monitor.conftest import MonitorFactory, monitor_config
from tests.monitor.test_jobs import spawn_engine  # noqa: F401 - the fixture
from tests.netdisco.scrapy_reference.runs import EXPECTED, PROJECT, normalised
from tests.netdisco.scrapy_reference.site import serve

TOKEN, DEPLOY = "c0ntrol-token", "d3ploy-token"
#: scrapyd-client's venv (``make`` builds it from the lock): it brings Scrapy itself, which
#: the suite's own venv must not have (netdisco maps ``import scrapy`` where Scrapy is absent)
TOOLS = Path(os.environ.get("NETDISCO_SCRAPYD_TOOLS", Path(__file__).parents[2] / ".venv-scrapyd"))
#: the keys of each list of listjobs.json, as Scrapyd 1.6 answers them
PENDING = {"id", "project", "spider", "version", "settings", "args"}
RUNNING = {"id", "project", "spider", "pid", "start_time", "log_url", "items_url"}
FINISHED = {"id", "project", "spider", "start_time", "end_time", "log_url", "items_url"}


@pytest.fixture
async def reference_site() -> AsyncIterator[str]:
    runner, base = await serve()
    yield base
    await runner.cleanup()


async def scrapyd_monitor(zk_hosts: str, start_monitor: MonitorFactory, **more: Any) -> Monitor:
    control = ControlSettings(token=TOKEN, deploy_token=DEPLOY, **more)
    monitor, _ = await start_monitor(replace(monitor_config(zk_hosts), control=control))
    return monitor


async def deployed(monitor: Monitor, tmp_path: Path, version: str = "1.0") -> Path:
    """The reference project deployed to ``monitor`` by ``scrapyd-deploy``."""
    project = startproject(tmp_path, monitor.http.url)
    code, out, err = await run("scrapyd-deploy", "--version", version, cwd=project)
    assert code == 0, err
    ok(json.loads(out), project="bookproj", version=version, spiders=2)
    return project


def startproject(tmp_path: Path, url: str) -> Path:
    """The reference project as ``scrapy startproject`` wrote it, its deploy target the
    monitor (the one line a Scrapyd user changes), with the deploy token as password."""
    project = tmp_path / "bookproj"
    shutil.copytree(PROJECT, project, ignore=shutil.ignore_patterns("__pycache__"))
    cfg = project / "scrapy.cfg"
    target = f"url = {url}/\nusername = deployer\npassword = {DEPLOY}"
    cfg.write_text(cfg.read_text().replace("#url = http://localhost:6800/", target))
    return project


async def run(program: str, *argv: str, cwd: Path) -> tuple[int, str, str]:
    """One of scrapyd-client's commands in ``cwd`` (no ~/.netrc: HOME is the test's)."""
    tool = TOOLS / "bin" / program
    assert tool.exists(), f"{tool} is missing: make .venv-scrapyd/.installed builds it"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NETDISCO_", "VIRTUAL_ENV"))}
    env["HOME"] = str(cwd.parent)
    proc = await asyncio.create_subprocess_exec(
        str(tool), *argv, cwd=cwd, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    return proc.returncode or 0, out.decode(), err.decode()


#: scrapyd-client's Python client, run in its venv: one call, its answer or error as JSON
PYCLIENT = """
import json, sys
from scrapyd_client.exceptions import ErrorResponse
from scrapyd_client.pyclient import ScrapydClient
url, user, password, method, args = sys.argv[1:]
client = ScrapydClient(url, user, password)
try:
    print(json.dumps({"result": getattr(client, method)(*json.loads(args))}))
except ErrorResponse as exc:
    print(json.dumps({"error": str(exc)}))
"""


class ErrorResponse(Exception):
    """What scrapyd-client's ``ErrorResponse`` said (raised in its own venv)."""


class ScrapydClient:
    """scrapyd-client's ``ScrapydClient``, each method called in scrapyd-client's venv."""

    def __init__(self, url: str, user: str, password: str) -> None:
        self.auth = [url, user, password]

    async def call(self, method: str, *args: Any) -> Any:
        python = TOOLS / "bin" / "python"
        assert python.exists(), f"{python} is missing: make .venv-scrapyd/.installed builds it"
        proc = await asyncio.create_subprocess_exec(
            str(python), "-c", PYCLIENT, *self.auth, method, json.dumps(args),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        out, err = await asyncio.wait_for(proc.communicate(), 120)
        assert proc.returncode == 0, err.decode()
        answer = json.loads(out)
        if "error" in answer:
            raise ErrorResponse(answer["error"])
        return answer["result"]


def basic(token: str | None) -> dict[str, str]:
    """HTTP basic auth whose password is ``token``, as Scrapyd's clients send it."""
    if token is None:
        return {}
    return {"Authorization": "Basic " + base64.b64encode(f"someone:{token}".encode()).decode()}


async def call(
    method: str, url: str, token: str | None = None, **kwargs: Any
) -> tuple[int, dict[str, Any]]:
    """A Scrapyd route with basic auth (the password is the token), as its clients call."""
    async with (
        aiohttp.ClientSession(headers=basic(token)) as s,
        s.request(method, url, **kwargs) as resp,
    ):
        return resp.status, await resp.json()


async def text(url: str, token: str = TOKEN) -> str:
    async with aiohttp.ClientSession(headers=basic(token)) as s, s.get(url) as resp:
        assert resp.status == 200, await resp.text()
        return await resp.text()


def ok(answer: dict[str, Any], **body: Any) -> None:
    """Scrapyd's answer: ``status`` ok, the node's name, and exactly ``body`` besides."""
    assert isinstance(answer.pop("node_name"), str)
    assert answer == {"status": "ok", **body}


async def currstate(client: ScrapydClient, job: str, *states: str) -> None:
    async def reached() -> bool:
        answer = await client.call("status", job, "bookproj")
        return answer["currstate"] in states

    await eventually(reached, f"job {job} {'/'.join(states)}", timeout=180)


async def test_scrapyd_deploy_schedule_list_log_items_cancel_and_delete(
    zk_hosts,
    start_monitor,
    spawn_engine,  # noqa: F811 - the fixture
    reference_site,
    tmp_path,
):
    monitor = await scrapyd_monitor(zk_hosts, start_monitor)
    base = monitor.http.url
    project = await deployed(monitor, tmp_path)
    await spawn_engine("e1")
    await eventually(lambda: monitor.jobs.slots(), "an engine with slots", timeout=30)
    client = ScrapydClient(base, "someone", TOKEN)
    code, out, _ = await run("scrapyd-client", "projects", cwd=project)
    assert (code, out.split()) == (0, ["bookproj"])
    assert await client.call("spiders", "bookproj") == ["authors", "books"]
    args = [("setting", "PRICE_RATE=3"), ("site", reference_site)]
    job = await client.call("schedule", "bookproj", "books", args)
    assert is_job_id(job)
    await currstate(client, job, "finished")
    ok(await client.call("status", job, "bookproj"), currstate="finished")
    ok(await client.call("daemonstatus"), pending=0, running=0, finished=1)
    listed = await client.call("jobs", "bookproj")
    assert isinstance(listed.pop("node_name"), str)
    assert (listed["status"], listed["pending"], listed["running"]) == ("ok", [], [])
    (row,) = listed["finished"]
    assert set(row) == FINISHED
    assert (row["id"], row["project"], row["spider"]) == (job, "bookproj", "books")
    assert row["log_url"] == f"/logs/bookproj/books/{job}.log"
    log = await text(base + row["log_url"])
    assert "priced 3 books" in log  # the pipeline's own log
    said = [line for line in log.splitlines() if '"job_settings_unused"' in line]
    assert len(said) == 1  # the setting= netdisco does not know, said once
    assert '"names": ["PRICE_RATE"]' in said[0]
    items = normalised(await text(base + row["items_url"]), reference_site)
    expected = (EXPECTED / "books.jsonl").read_text().splitlines()
    assert prices_at(items, 3) == prices_at(expected, 2)  # the setting reached from_crawler
    argv = ("schedule", "-p", "bookproj", "authors", "--arg", f"site={reference_site}")
    code, out, err = await run("scrapyd-client", *argv, cwd=project)  # scrapy.cfg's password
    assert code == 0, err
    assert out.startswith("bookproj / authors => ")
    await currstate(client, out.split()[-1], "finished")
    await cancel_a_running_job(client, reference_site)
    await delete_a_version_then_the_project(base, project)


def prices_at(lines: list[str], rate: int) -> list[dict[str, Any]]:
    """The items with each price as the site's (the pipeline multiplies by PRICE_RATE)."""
    items = [json.loads(line) for line in lines]
    return [{**item, "price": round(item["price"] / rate, 2)} for item in items]


async def cancel_a_running_job(client: ScrapydClient, site: str) -> None:
    """A job of a chosen ``jobid``, slowed by a Scrapy setting, cancelled while it runs."""
    jobid = "0123456789ab"
    args = [("jobid", jobid), ("setting", "DOWNLOAD_DELAY=60"), ("site", site)]
    assert await client.call("schedule", "bookproj", "books", args) == jobid
    await currstate(client, jobid, "running")
    running = (await client.call("jobs", "bookproj"))["running"]
    assert [set(r) for r in running] == [RUNNING]
    answer = await client.call("cancel", "bookproj", jobid)
    ok(answer, prevstate="running")
    await currstate(client, jobid, "finished")
    ok(await client.call("cancel", "bookproj", jobid), prevstate=None)


async def delete_a_version_then_the_project(base: str, project: Path) -> None:
    """A second version deployed, the first deleted (with the deploy token), the project."""
    client = ScrapydClient(base, "someone", DEPLOY)
    settings = project / "bookproj" / "settings.py"
    settings.write_text(settings.read_text() + "\n# the second version\n")
    code, out, err = await run("scrapyd-deploy", "--version", "2.0", cwd=project)
    assert code == 0, err
    ok(json.loads(out), project="bookproj", version="2.0", spiders=2)
    assert await client.call("versions", "bookproj") == ["1.0", "2.0"]
    ok(await client.call("delversion", "bookproj", "1.0"))
    assert await client.call("versions", "bookproj") == ["2.0"]
    with pytest.raises(ErrorResponse, match=r"version '1\.0' not found"):
        await client.call("delversion", "bookproj", "1.0")
    ok(await client.call("delproject", "bookproj"))
    assert await client.call("projects") == []


def egg(*members: tuple[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in members:
            archive.writestr(name, data)
    return buffer.getvalue()


ENTRY = ("EGG-INFO/entry_points.txt", b"[scrapy]\nsettings = p.settings\n")
SPIDER = ("p/spiders.py", b"import scrapy\n\n\nclass S(scrapy.Spider):\n    name = 's'\n")


def upload(project: str, version: str, data: bytes) -> aiohttp.FormData:
    form = aiohttp.FormData({"project": project, "version": version})
    form.add_field("egg", io.BytesIO(data), filename="project.egg")
    return form


async def test_scrapyd_routes_refuse_wrong_tokens_and_hostile_fields(zk_hosts, start_monitor):
    monitor = await scrapyd_monitor(zk_hosts, start_monitor, max_project_size=100_000)
    url = monitor.http.url
    good = egg(ENTRY, SPIDER)
    for token, status in ((None, 401), ("wrong", 403), (TOKEN, 403)):  # deploy wants DEPLOY
        got, answer = await call(
            "POST", f"{url}/addversion.json", token, data=upload("p", "1", good)
        )
        assert (got, answer["status"], "node_name" in answer) == (status, "error", True)
    hostile = {  # Scrapyd answers a bad request with 200; a cap is 413
        ("../p", "1", good): (200, "a project name is 1-64 of a-z"),
        ("p", "1 2", good): (200, "a version label is 1-64"),
        ("p", "1", b"not a zip"): (200, "not a zip file"),
        ("p", "1", egg(SPIDER)): (200, "the egg has no EGG-INFO/entry_points.txt"),
        ("p", "1", egg(ENTRY, SPIDER, ("../../x.py", b""))): (200, "leaves the project"),
        ("p", "1", egg(ENTRY, SPIDER, ("p/0.bin", bytes(10 << 20)))): (413, "expands more than"),
    }
    for (project, version, data), (status, message) in hostile.items():
        form = upload(project, version, data)
        got, answer = await call("POST", f"{url}/addversion.json", DEPLOY, data=form)
        assert (got, answer["status"]) == (status, "error"), message
        assert message in answer["message"]
    got, answer = await call(
        "POST", f"{url}/addversion.json", DEPLOY, data=upload("p", "1", os.urandom(200_000))
    )
    assert (got, answer["status"]) == (413, "error")
    with aiohttp.MultipartWriter("form-data") as nested:
        nested.append(aiohttp.MultipartWriter("mixed"))
    got, answer = await call("POST", f"{url}/addversion.json", DEPLOY, data=nested)
    assert (got, answer["message"]) == (
        200,
        "a form field is itself multipart: send fields and files",
    )
    for header in ("Basic !!!", "Basic " + base64.b64encode(b"no colon").decode(), "Digest x"):
        async with (
            aiohttp.ClientSession(headers={"Authorization": header}) as s,
            s.post(f"{url}/addversion.json", data=upload("p", "1", good)) as resp,
        ):
            assert (resp.status, (await resp.json())["status"]) == (401, "error"), header
    assert await monitor.projects.store.projects() == []  # nothing refused was stored
    await scheduling_is_checked(url)


async def scheduling_is_checked(url: str) -> None:
    got, answer = await call("POST", f"{url}/schedule.json", data={"project": "p", "spider": "s"})
    assert (got, answer["status"]) == (401, "error")
    hostile = {
        (("spider", "s"),): "'project' parameter is required",
        (("project", "p"),): "'spider' parameter is required",
        (("project", "nope"), ("spider", "s")): "project 'nope' not found",
        (("project", "p"), ("spider", "s"), ("jobid", "../x")): "jobid is invalid",
        (("project", "p"), ("spider", "s"), ("setting", "X")): "setting is invalid",
        (("project", "p"), ("spider", "s"), ("priority", "high")): "priority is invalid",
        tuple(("project", "p") for _ in range(300)): "at most 200 fields",
    }
    for fields, message in hostile.items():
        got, answer = await call("POST", f"{url}/schedule.json", TOKEN, data=list(fields))
        assert (got, answer["status"]) == (200, "error"), message
        assert message in answer["message"]
    got, answer = await call("GET", f"{url}/status.json?job=../../etc")
    assert (got, answer["status"], answer["currstate"]) == (200, "ok", None)
    got, answer = await call("GET", f"{url}/listspiders.json?project=nope")
    assert (got, answer["message"]) == (200, "project 'nope' not found")
    got, _ = await call("GET", f"{url}/logs/p/s/0123456789ab.log", TOKEN)
    assert got == 404


async def test_a_scheduled_job_is_requeued_on_another_engine_when_its_engine_is_killed(
    zk_hosts,
    start_monitor,
    spawn_engine,  # noqa: F811 - the fixture
    reference_site,
    tmp_path,
):
    monitor = await scrapyd_monitor(zk_hosts, start_monitor)
    await deployed(monitor, tmp_path)
    first = await spawn_engine("e1")
    await eventually(lambda: len(monitor.jobs.slots()) == 1, "one engine", timeout=30)
    client = ScrapydClient(monitor.http.url, "someone", TOKEN)
    args = [("setting", "DOWNLOAD_DELAY=60"), ("site", reference_site)]  # slow: still running
    job = await client.call("schedule", "bookproj", "books", args)
    await currstate(client, job, "running")
    await spawn_engine("e2")
    await eventually(lambda: len(monitor.jobs.slots()) == 2, "the second engine", timeout=30)
    first.send_signal(signal.SIGKILL)  # Scrapyd would lose the job with its host
    await first.wait()

    async def on_e2() -> bool:
        got = await monitor.jobs.store.get(job)
        return got is not None and (got[0].engine, got[0].state) == ("e2", "running")

    await eventually(on_e2, "the job running again, on e2", timeout=60)
    (row,) = (await client.call("jobs", "bookproj"))["running"]
    assert row["id"] == job
    ok(await client.call("cancel", "bookproj", job), prevstate="running")
    await currstate(client, job, "finished")
