"""A refused job transition, on a real cluster: the monitor and an engine both ask the one
table (``netdisco.cluster.jobs.TRANSITIONS``), log the refusal with both states and
leave the job as it is."""

from __future__ import annotations

import json
import time
from pathlib import Path

from structlog.testing import capture_logs

from netdisco.cluster.jobs import Job, JobState, new_id, transition
from netdisco.testing import eventually
from tests.monitor.conftest import monitor_config
from tests.monitor.test_jobs import (  # noqa: F401 - fixtures
    Client,
    site,
    spawn_engine,
    state_of,
    steering_engines,
    with_token,
)


async def test_the_monitor_refuses_to_cancel_a_finished_job_and_logs_both_states(
    zk_hosts, start_monitor
):
    monitor, _ = await start_monitor(with_token(monitor_config(zk_hosts)))
    done = Job(id=new_id(), spider="s", state=JobState.FINISHED, created_at=time.time())
    await monitor.jobs.store.create(done)
    with capture_logs() as logs:
        status, answer = await Client(monitor).call("POST", f"/{done.id}/cancel")
    assert (status, answer["error"]["code"]) == (409, "job_ended")
    refused = [e for e in logs if e["event"] == "job_transition_refused"]
    assert [(e["job"], e["state"], e["to"]) for e in refused] == [
        (done.id, "finished", "cancelled")
    ]
    got = await monitor.jobs.store.get(done.id)
    assert got is not None
    assert got[0].state is JobState.FINISHED


async def test_an_engine_refuses_to_end_a_job_marked_lost_and_logs_both_states(
    zk_hosts,
    start_monitor,
    spawn_engine,  # noqa: F811 - the fixture
    site,  # noqa: F811 - the fixture
    tmp_path: Path,
):
    monitor, client = await steering_engines(zk_hosts, start_monitor, spawn_engine, e1={})
    slow = {"spider": "tests.monitor.job_spiders:Walk", "args": {"site": site, "speed": "slow"},
            "settings": {"concurrency": "1", "download_delay": "0.1"}}  # fmt: skip
    (job,) = await client.start(**slow)
    await state_of(client, job["id"], "running")
    # a monitor that took the engine for lost (its view stale): the job ends lost, and the
    # cancel flag makes the engine stop the child, whose end it then tries to write
    lost = await monitor.jobs.store.update(
        job["id"], lambda j: transition(j, JobState.LOST, cancel=True, error="stale view")
    )
    assert lost is not None

    def refused() -> dict[str, str] | None:
        for line in (tmp_path / "e1.log").read_text().splitlines():
            entry = json.loads(line) if line.startswith("{") else {}
            if entry.get("event") == "job_transition_refused":
                return dict(entry)
        return None

    entry = await eventually(refused, "the engine's refusal, logged", timeout=30)
    assert (entry["job"], entry["state"], entry["to"]) == (job["id"], "lost", "cancelled")
    final = await client.job(job["id"])
    assert (final["state"], final["error"]) == ("lost", "stale view")
