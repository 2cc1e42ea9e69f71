"""Command jobs on a real cluster: a project that declares a shell script as its jobs,
deployed through the monitor, run by real ``netdisco engine`` processes: its items, its
log followed, a failed exit, a cancel, and its engine killed with ``kill -9``."""

from __future__ import annotations

import asyncio
import io
import json
import re
import signal
import zipfile
from dataclasses import replace
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from monitor.settings import ControlSettings
from netdisco.projects import archive
from netdisco.testing import eventually
from tests.monitor.conftest import monitor_config
from tests.monitor.test_dashboard import shows
from tests.monitor.test_http import CHROMIUM, chromium
from tests.monitor.test_jobs import Client, Spawn, spawn_engine, state_of, with_token  # noqa: F401
from tests.netdisco.test_command_child import gone

CRAWL = r"""#!/bin/sh
# crawl.sh MODE [N] [HOLD]: write N items and a bad line, fail, or loop N times (then
# wait while the file HOLD exists)
mode=$1
n=${2:-3}
case $mode in
items)
  echo "writing $n items from $(pwd) with $VIRTUAL_ENV"
  i=0
  while [ $i -lt "$n" ]; do
    i=$((i + 1))
    echo "{\"n\": $i, \"arg\": \"$3\"}" >> "$NETDISCO_ITEMS"
  done
  echo "not an item" >> "$NETDISCO_ITEMS"
  ;;
fail)
  echo "giving up: the site is down" >&2
  exit 3
  ;;
loop)
  trap 'echo "stopped cleanly after $i"; exit 143' TERM
  i=0
  while [ $i -lt "$n" ]; do
    i=$((i + 1))
    echo "{\"n\": $i}" >> "$NETDISCO_ITEMS"
    echo "item $i"
    sleep 0.1
  done
  while [ -n "$3" ] && [ -e "$3" ]; do sleep 0.05; done  # held until the test says
  ;;
esac
"""
PYPROJECT = """[project]
name = "shell"
version = "1"
dependencies = []

[tool.netdisco.commands]
items = ["./crawl.sh", "items"]
fail = ["./crawl.sh", "fail"]
loop = ["./crawl.sh", "loop"]
"""


def shell_project(directory: Path) -> bytes:
    """The project's archive: a shell script and a pyproject.toml, no Python at all."""
    directory.mkdir()
    (directory / "pyproject.toml").write_text(PYPROJECT)
    (directory / "crawl.sh").write_text(CRAWL)
    return archive.pack(directory)


async def deploy(base: str, name: str, data: bytes) -> tuple[int, Any]:
    url = f"{base}/netdiscovery/monitor/projects/{name}"
    async with aiohttp.ClientSession() as s, s.post(url, data=data) as resp:
        return resp.status, await resp.json()


def zipped(files: dict[str, str]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as out:
        for name, text in files.items():
            out.writestr(name, text)
    return buffer.getvalue()


async def logged(client: Client, job_id: str, text: str) -> str:
    async def has() -> str | None:
        found = await client.log(job_id, tail="1000")
        return found if text in found else None

    return str(await eventually(has, f"{text!r} in the log of job {job_id}", timeout=60))


@pytest.mark.timeout(300)
async def test_a_command_job_keeps_items_fails_is_cancelled_and_requeued_when_lost(
    zk_hosts,
    start_monitor,
    spawn_engine: Spawn,  # noqa: F811 - test_jobs' fixture: engines that run jobs
    tmp_path,
):
    monitor, rec = await start_monitor(with_token(monitor_config(zk_hosts)))
    status, body = await deploy(monitor.http.url, "shell", shell_project(tmp_path / "shell"))
    assert status == 201, body
    assert body["spiders"] == []
    assert body["commands"]["loop"] == ["./crawl.sh", "loop"]
    engines = {"e1": await spawn_engine("e1"), "e2": await spawn_engine("e2")}
    await eventually(lambda: len(monitor.jobs.slots()) == 2, "two engines", timeout=30)
    client = Client(monitor)
    # items: the declared arguments, then the job's; a bad line counted, not kept
    run = {"project": "shell", "command": "items"}
    (job,) = await client.start(**run, argv=["5", "it's; rm -rf /"], on=["e1"])
    done = await state_of(client, job["id"], "finished", "failed", timeout=180)
    assert done["state"] == "finished", done["error"]
    assert (done["kind"], done["spider"], done["exit_status"]) == ("command", "items", 0)
    assert (done["stats"]["items_kept"], done["stats"]["items_bad"]) == (5, 1)
    status, page = await client.call("GET", f"/{job['id']}/items?offset=3&limit=10")
    assert status == 200, page
    assert page["items"] == [{"n": 4, "arg": "it's; rm -rf /"}, {"n": 5, "arg": "it's; rm -rf /"}]
    text = await client.log(job["id"], tail="100")
    assert re.search(r"writing 5 items from \S+/src with \S+/venv", text), text
    assert '"item_line_refused"' in text
    # a failed exit: failed, with the reason and the last line it wrote
    (failing,) = await client.start(project="shell", command="fail", on=["e2"])
    failed = await state_of(client, failing["id"], "failed", "finished", timeout=180)
    assert failed["exit_status"] == 3
    assert failed["error"] == (
        "the command exited with status 3; its last line: giving up: the site is down"
    )
    await eventually(lambda: rec.of("job_failed"), "job_failed, reported")
    # a cancel while its log is followed: SIGTERM to its group, the script's trap runs
    (looping,) = await client.start(project="shell", command="loop", argv=["100000"], on=["e1"])
    await state_of(client, looping["id"], "running")
    await logged(client, looping["id"], "item 3")

    async def browsable() -> bool:
        status, page = await client.call("GET", f"/{looping['id']}/items?limit=3")
        return status == 200 and page["items"] == [{"n": 1}, {"n": 2}, {"n": 3}]

    await eventually(browsable, "its items, read while it runs", timeout=30)
    follow = asyncio.create_task(client.log(looping["id"], tail="1000", follow="1"))
    status, _ = await client.call("POST", f"/{looping['id']}/cancel")
    assert status == 200
    cancelled = await state_of(client, looping["id"], "cancelled")
    text = await asyncio.wait_for(follow, 30)  # the stream ends with the job
    assert "job_stopping" in text
    assert "stopped cleanly after" in text
    assert cancelled["stats"]["items_kept"] >= 3
    # lost with its engine: requeued, run again on the other engine to its end
    hold = tmp_path / "hold"  # the first run cannot end before its engine is killed
    hold.touch()
    (lost,) = await client.start(
        project="shell", command="loop", argv=["40", str(hold)], on=["e1", "e2"],
        on_lost="requeue",
    )  # fmt: skip
    running = await state_of(client, lost["id"], "running")
    victim = running["engine"]  # either: placement chooses
    (other,) = set(engines) - {victim}
    await logged(client, lost["id"], "item 2")
    log_file = tmp_path / victim / lost["id"] / "job.log"
    started = next(
        json.loads(line)
        for line in log_file.read_text().splitlines()
        if '"command_started"' in line
    )
    engines[victim].send_signal(signal.SIGKILL)
    await engines[victim].wait()
    await eventually(lambda: rec.of("job_lost"), "the job lost with its engine", timeout=30)
    await eventually(lambda: gone(started["pid"]), "its command ended with it", timeout=30)
    await state_of(client, lost["id"], "running")  # again, on the other engine
    hold.unlink()
    again = await state_of(client, lost["id"], "finished", "failed", timeout=180)
    assert (again["state"], again["engine"], again["attempts"]) == ("finished", other, 2)
    assert again["stats"]["items_kept"] == 40


async def test_a_command_job_is_refused_when_it_cannot_be_run_as_asked(
    zk_hosts, start_monitor, tmp_path
):
    monitor, _ = await start_monitor(with_token(monitor_config(zk_hosts)))
    base = monitor.http.url
    status, _ = await deploy(base, "shell", shell_project(tmp_path / "shell"))
    assert status == 201
    client = Client(monitor)
    refused: dict[str, tuple[dict[str, Any], str]] = {
        "unknown": ({"command": "nope"}, "has no command 'nope'; its commands: fail, items, loop"),
        "a NUL": ({"command": "items", "argv": ["a\x00b"]}, "holds a control character"),
        "a newline": ({"command": "items", "argv": ["a\nb"]}, "holds a control character"),
        "too many": ({"command": "items", "argv": ["x"] * 65}, "a list of 0 to 64 strings"),
        "too long": ({"command": "items", "argv": ["x" * 1025]}, "over 1024 characters"),
        "not strings": ({"command": "items", "argv": [1]}, "is not a string"),
        "a string": ({"command": "items", "argv": "rm -rf /"}, "a list of 0 to 64"),
        "spider args": ({"command": "items", "args": {"a": "b"}}, 'takes "argv"'),
        "a setting": ({"command": "items", "settings": {"concurrency": 9}}, "only stop_deadline"),
        "a bad name": ({"command": "../x"}, "expected the name of a project's command"),
    }
    for case, (body, said) in refused.items():
        status, answer = await client.call("POST", "", {"project": "shell", **body})
        assert status == 400, case
        assert said in answer["error"]["message"], (case, answer)
    status, answer = await client.call("POST", "", {"command": "items"})  # no project
    assert (status, "name the project" in answer["error"]["message"]) == (400, True)
    status, answer = await client.call("POST", "", {"spider": "x", "argv": ["y"]})
    assert (status, "only a command job" in answer["error"]["message"]) == (400, True)
    assert monitor.jobs.jobs == {}
    # a schedule's request is checked as a job's
    schedules = f"{base}/netdiscovery/monitor/schedules"
    async with aiohttp.ClientSession(headers=client.headers) as s:
        wrong = {"project": "shell", "command": "nope", "every": "1h"}
        async with s.post(schedules, json=wrong) as resp:
            assert resp.status == 400
            assert "its commands: fail, items, loop" in (await resp.json())["error"]["message"]
        right = {"project": "shell", "command": "items", "argv": ["2"], "every": "1h"}
        async with s.post(schedules, json=right) as resp:
            assert resp.status == 201, await resp.text()
    # declarations refused at deploy, and nothing stored
    top = {"crawl.sh": "#!/bin/sh\n", "bin/run": "#!/bin/sh\n"}
    declared = {
        '["/bin/sh", "-c", "id"]': "is outside the project",
        '["../crawl.sh"]': "is outside the project",
        '["bin/../../x"]': "is outside the project",
        '["./missing.sh"]': "the project has no file './missing.sh'",
        '["crawl.sh"]': "write './crawl.sh'",
        '"./crawl.sh --all"': "expected a list of 1 to 64 strings",
        "[]": "expected a list of 1 to 64 strings",
        '["sh", "-c", "echo\\nid"]': "holds a control character",
        '["$(id)"]': "is not a program name",
    }
    for argv, said in declared.items():
        pyproject = (
            f'[project]\nname = "x"\nversion = "1"\n[tool.netdisco.commands]\nrun = {argv}\n'
        )
        status, answer = await deploy(base, "hostile", zipped({**top, "pyproject.toml": pyproject}))
        assert (status, answer["error"]["code"]) == (400, "bad_command"), argv
        assert said in answer["error"]["message"], (argv, answer)
    async with aiohttp.ClientSession() as s:
        async with s.get(f"{base}/netdiscovery/monitor/projects/hostile") as resp:
            assert resp.status == 404
        async with s.get(f"{base}/netdiscovery/monitor/projects/shell/spiders") as resp:
            listed = await resp.json()
    assert listed["commands"][1] == {"name": "items", "argv": ["./crawl.sh", "items"]}


@pytest.mark.browser
@pytest.mark.timeout(240)  # Chromium's first start and the project's install, on a loaded machine
@pytest.mark.skipif(not CHROMIUM.exists(), reason="/usr/bin/chromium absent")
async def test_the_jobs_page_starts_a_command_and_shows_its_log(
    zk_hosts,
    start_monitor,
    spawn_engine: Spawn,  # noqa: F811 - test_jobs' fixture: engines that run jobs
    tmp_path,
):
    config = replace(monitor_config(zk_hosts), control=ControlSettings())  # loopback, no token
    monitor, _ = await start_monitor(config)
    status, _ = await deploy(monitor.http.url, "shell", shell_project(tmp_path / "shell"))
    assert status == 201
    await spawn_engine("e1")
    await eventually(lambda: monitor.jobs.slots(), "an engine with slots", timeout=30)
    pick = "document.querySelector('#spider-pick')"
    async with chromium(f"{monitor.http.url}/jobs?project=shell", tmp_path / "profile") as page:
        has = f"[...{pick}.options].some(o => o.value === 'command:items')"
        await shows(page, f"{has} && document.querySelector('#start-button') !== null", "it")
        await page.eval(
            f"{pick}.value = 'command:items';"
            "document.querySelector('#args').value = '[\"4\", \"from the page\"]';"
            "document.querySelector('#start-button').click(); true"
        )
        log = "document.querySelector('#log').textContent"
        await shows(page, f"{log}.includes('writing 4 items from')", "the command's own log")
        (job_id,) = monitor.jobs.jobs
        state = f"document.querySelector(\"tr[data-job='{job_id}'] .state\").textContent"
        await shows(page, f"{state} === 'finished'", "the job finished, in the list")
        listed = f"document.querySelector(\"tr[data-job='{job_id}']\").textContent"
        assert "items (command)" in await page.eval(listed)
    job = monitor.jobs.jobs[job_id]
    assert (job.kind, job.argv) == ("command", ("4", "from the page"))
