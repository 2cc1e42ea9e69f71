"""Job records, requests and placement (pure logic), and a job's log file (a real file)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from netdisco.cluster.contract import MAX_JOB_SPIDERS, EnginePayload, parse_payload
from netdisco.cluster.jobs import (
    MAX_JOB_DATA,
    Job,
    JobState,
    engine_slots,
    fan_out,
    job_path,
    job_request,
    parse_job,
    place,
    refuse_unplaceable,
)
from netdisco.cluster.settings import ZooKeeperSettings
from netdisco.engine.config import EngineSettings
from netdisco.engine.joblog import LogWriter, follow, job_dir, tail
from netdisco.engine.jobs import jobs_dir
from netdisco.exceptions import ConfigError
from netdisco.testing import eventually

ID = "0123456789ab"


def engine(name: str, most: int = 2, **labels: str) -> EnginePayload:
    return EnginePayload(id=name, incarnation=f"i-{name}", max_jobs=most, labels=labels)


@pytest.mark.parametrize(
    ("body", "key"),
    [
        ([], "body"),
        ({"spider": "a:B", "colour": 1}, "colour"),
        ({"spider": "a/../b"}, "spider"),
        ({"spider": "a:B", "on": "../x"}, "on"),
        ({"spider": "a:B", "on": []}, "on"),
        ({"spider": "a:B", "on": ["e/1"]}, "on"),
        ({"spider": "a:B", "on_lost": "retry"}, "on_lost"),
        ({"spider": "a:B", "args": {"a": 1}}, "args"),
        ({"spider": "a:B", "settings": []}, "settings"),
        ({"spider": "a:B", "project": "../p"}, "project"),
        ({"spider": "a:B", "settings": {"user_agents": "x" * MAX_JOB_DATA}}, "job"),
    ],
)
def test_a_bad_request_is_refused_naming_its_key(body, key):
    with pytest.raises(ConfigError) as caught:
        job_request(body)
    assert caught.value.key == key


def test_a_request_round_trips_through_its_node():
    job = job_request({"spider": "m:S", "args": {"q": "x"}, "on": ["e1", "e2"]}, now=5.0)
    back = parse_job(job.id, job.to_json())
    assert back == job
    assert back is not None
    assert (back.on, back.state) == (("e1", "e2"), JobState.PENDING)


@pytest.mark.parametrize(
    "raw",
    [b"", b"\xff", b"[]", b'{"spider": 1}', b'{"spider": "s", "state": "odd"}',
     b'{"spider": "s", "state": "running", "args": {"a": 2}}',
     b'{"spider": "s", "state": "running", "engine": 3}', b"{" * 100_000],
)  # fmt: skip
def test_whatever_a_node_holds_never_raises(raw):
    assert parse_job(ID, raw) is None


def test_a_name_that_is_no_job_id_is_no_job_and_no_path():
    assert parse_job("../x", Job(id=ID, spider="s").to_json()) is None
    with pytest.raises(ConfigError):
        job_path("/netdiscovery", "../../etc")
    with pytest.raises(ValueError, match="not a job id"):
        job_dir(Path("/tmp/jobs"), "../secret")


def test_payload_carries_slots_and_labels_and_drops_garbage():
    payload = parse_payload(engine("e1", 3, zone="a").to_json())
    assert (payload.max_jobs, payload.labels) == (3, {"zone": "a"})
    odd = parse_payload(b'{"id": "e", "max_jobs": "4", "labels": {"z": 1}, "jobs": [1, "j"]}')
    assert (odd.max_jobs, odd.labels, odd.jobs) == (None, {}, ("j",))


def test_placement_most_free_slots_named_engines_and_labels():
    running = Job(id=ID, spider="s", engine="e1", incarnation="i-e1", state=JobState.RUNNING)
    slots = [engine_slots(engine(n, zone=z), [running]) for n, z in (("e1", "a"), ("e2", "b"))]
    assert [s.free for s in slots if s] == [1, 2]
    good = [s for s in slots if s is not None]

    def where(on: str | tuple[str, ...]) -> str | None:
        found = place(Job(id=ID, spider="s", on=on), good)
        return None if found is None else found.engine

    assert (where("any"), where(("e1",)), where("zone=a"), where("zone=c")) == (
        "e2", "e1", "e1", None)  # fmt: skip
    assert engine_slots(EnginePayload(id="old"), []) is None  # an engine without jobs
    full = [engine_slots(engine("e1", 1), [running])]
    assert place(Job(id=ID, spider="s"), [s for s in full if s]) is None  # waits
    assert sorted(j.on for j in fan_out(Job(id=ID, spider="s", on="all"), good)) == [
        ("e1",), ("e2",)]  # fmt: skip
    with pytest.raises(ConfigError):
        fan_out(Job(id=ID, spider="s", on="all"), [])


def test_a_job_no_engine_may_take_is_refused_naming_those_that_may():
    """Named engines, or a label, that no engine running jobs has: it would wait for
    ever. Busy engines are no reason: the job waits for a slot."""
    held = Job(id=ID, spider="s", engine="e1", incarnation="i-e1", state=JobState.RUNNING)
    busy = engine_slots(engine("e1", 1, zone="a"), [held])
    slots = [s for s in (busy, engine_slots(engine("e2"), [])) if s is not None]
    for on in ("any", "all", ("e1",), ("e9", "e2"), "zone=a"):
        refuse_unplaceable(Job(id=ID, spider="s", on=on), slots)
    with pytest.raises(ConfigError) as caught:
        refuse_unplaceable(Job(id=ID, spider="s", on=("e9",)), slots)
    assert str(caught.value) == (
        "on: no engine 'e9' runs jobs in the cluster; the engines that run jobs: e1 (zone=a), e2"
    )
    with pytest.raises(ConfigError, match="no engine that runs jobs has the label zone=b"):
        refuse_unplaceable(Job(id=ID, spider="s", on="zone=b"), slots)
    with pytest.raises(ConfigError, match="the engines that run jobs: none"):
        refuse_unplaceable(Job(id=ID, spider="s", on=("e1",)), [])


def test_a_node_offers_its_spiders_bounded():
    offered = {"m:A": "a", "m:B": "b"}
    payload = parse_payload(EnginePayload(id="e", max_jobs=1, job_spiders=offered).to_json())
    assert payload.job_spiders == offered
    many = {f"m:S{n}": "x" * (1 + n % 300) for n in range(MAX_JOB_SPIDERS + 100)}
    raw = json.dumps({"id": "e", "job_spiders": {**many, "m:Bad": 3}}).encode()
    kept = parse_payload(raw).job_spiders
    assert len(kept) <= MAX_JOB_SPIDERS
    assert all(isinstance(v, str) and len(v) <= 200 for v in kept.values())
    assert "m:Bad" not in kept
    assert "job_spiders" not in EnginePayload(id="e").to_dict()  # not said: left out


def test_the_default_jobs_dir_is_the_clusters_own_not_a_shared_temp_folder(tmp_path, monkeypatch):
    """Two clusters on one machine (a ``dev up`` and a test run), each with an
    ``engine-3``, keep their jobs and project caches apart, under the user's state."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    engine = EngineSettings()
    dev = ZooKeeperSettings.from_mapping({"hosts": "127.0.0.1:8320"})
    other = ZooKeeperSettings.from_mapping({"hosts": "127.0.0.1:40000"})
    chrooted = ZooKeeperSettings.from_mapping({"hosts": "127.0.0.1:8320/test"})
    found = {jobs_dir(engine, "engine-3", zk) for zk in (dev, other, chrooted)}
    assert len(found) == 3
    assert jobs_dir(engine, "engine-3", dev) == jobs_dir(engine, "engine-3", dev)
    for path in found:
        assert path.is_relative_to(tmp_path / "netdisco" / "jobs"), path
        assert path.name == "engine-3"
    assert "127.0.0.1_8320" in str(jobs_dir(engine, "engine-3", dev))  # readable
    mine = EngineSettings(jobs_dir=str(tmp_path / "mine"))
    assert jobs_dir(mine, "engine-3", dev) == tmp_path / "mine"


def test_log_rotates_by_size_and_tails_whole_lines(tmp_path):
    path = tmp_path / "job.log"
    writer = LogWriter(path, max_bytes=1000)
    for n in range(300):
        writer.write(json.dumps({"n": n}).encode())
    writer.write(b"x" * 100_000)  # cut at MAX_LINE, never kept whole
    writer.close()
    assert path.with_name("job.log.1").exists()
    assert path.with_name("job.log.2").exists()
    assert not path.with_name("job.log.3").exists()
    text, _ = tail(path.with_name("job.log.2"), 3)
    assert len(text.splitlines()) == 3
    assert tail(tmp_path / "none.log", 5) == (b"", 0)


async def test_follow_reads_new_lines_across_a_rotation_until_done(tmp_path):
    path = tmp_path / "job.log"
    writer = LogWriter(path, max_bytes=200)
    got: list[bytes] = []
    finished = False

    async def read() -> None:
        async for chunk in follow(path, 0, lambda: finished, poll=0.01):
            got.append(chunk)

    reader = asyncio.create_task(read())
    for n in range(40):
        writer.write(f"line {n:03d}".encode())
        writer.flush()
        await asyncio.sleep(0.005)
    finished = True
    await asyncio.wait_for(reader, 5)
    writer.close()
    lines = b"".join(got).splitlines()
    assert lines == [f"line {n:03d}".encode() for n in range(40)]  # none lost, none twice


async def test_a_log_followed_while_its_job_starts_waits_for_the_job(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A follower that comes between the job's taking and its child's start (its
    directory there, the job not yet running) keeps the stream open for what follows."""
    from types import SimpleNamespace

    import aiohttp
    from aiohttp import web

    from netdisco.cluster.settings import ZooKeeperSettings
    from netdisco.engine.config import EngineSettings
    from netdisco.engine.jobroutes import job_log
    from netdisco.engine.jobs import JobRunner

    runner = JobRunner(
        EngineSettings(jobs_dir=str(tmp_path)),
        ZooKeeperSettings(hosts="127.0.0.1:1"),
        "i",
        lambda: "e",
        lambda: None,
    )
    fake = SimpleNamespace(jobs=runner)
    directory = job_dir(runner.directory, ID)
    directory.mkdir(parents=True)
    runner._starting.add(ID)  # taken; its child not started yet
    asked: list[bool] = []  # each time the follower asked whether the job is still on
    active = runner.active

    def counted(job_id: str) -> bool:
        asked.append(active(job_id))
        return asked[-1]

    monkeypatch.setattr(runner, "active", counted)

    async def route(request: web.Request) -> web.StreamResponse:
        return await job_log(request, fake)  # type: ignore[arg-type]

    app = web.Application()
    app.router.add_get("/jobs/{id}/log", route)
    server = web.AppRunner(app, access_log=None, shutdown_timeout=1)
    await server.setup()
    await web.TCPSite(server, "127.0.0.1", 0).start()
    url = f"http://127.0.0.1:{server.addresses[0][1]}/jobs/{ID}/log"
    writer = LogWriter(directory / "job.log", max_bytes=10_000)
    try:
        async with aiohttp.ClientSession() as http, http.get(url, params={"follow": "1"}) as answer:
            assert answer.status == 200
            # the follower found nothing yet and asked twice: it waits, it did not end
            await eventually(lambda: len(asked) >= 2, "the follower polling", timeout=30)
            assert all(asked)
            writer.write(b'{"event": "job_running"}')
            writer.flush()
            runner._starting.discard(ID)  # started, ran, ended: the stream ends after it
            assert b"job_running" in await asyncio.wait_for(answer.read(), 10)
    finally:
        writer.close()
        await server.cleanup()
