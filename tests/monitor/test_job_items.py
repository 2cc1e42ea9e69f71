"""A job's items, kept in its directory feed or not: counted, bounded by ``job_items_max``,
read in pages and downloaded as JSON lines and CSV through the monitor (and the CLI), on
real ZooKeeper, a real monitor and real engines."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

import aiohttp

from tests.monitor.test_job_names import cli
from tests.monitor.test_jobs import (  # noqa: F401 - fixtures
    Client,
    site,
    spawn_engine,
    state_of,
    steering_engines,
    with_token,
)


async def fetch(client: Client, path: str, **params: str) -> tuple[int, str, dict[str, str]]:
    async with (
        aiohttp.ClientSession(headers=client.headers) as s,
        s.get(f"{client.base}{path}", params=params) as resp,
    ):
        return resp.status, await resp.text(), dict(resp.headers)


async def test_items_are_kept_counted_paged_downloaded_and_bounded(
    zk_hosts,
    start_monitor,
    spawn_engine,  # noqa: F811 - the fixture
    site,  # noqa: F811 - the fixture
    tmp_path: Path,
):
    monitor, client = await steering_engines(
        zk_hosts, start_monitor, spawn_engine, e1={}, e2={"job_items_max": 50}
    )
    walk: dict[str, Any] = {"spider": "walk", "args": {"site": site}}  # no feed declared
    (kept,) = await client.start(**walk, on=["e1"])
    (bounded,) = await client.start(**walk, on=["e2"])
    done = await state_of(client, kept["id"], "finished", "failed")
    assert (done["state"], done["feeds"]) == ("finished", [])
    assert (done["stats"]["items_kept"], done["stats"]["items_dropped"]) == (200, 0)
    # a page: bounded, with the count
    status, text, _ = await fetch(client, f"/{kept['id']}/items", offset="10", limit="5")
    assert status == 200
    page = json.loads(text)
    assert (page["items_kept"], page["items_dropped"], page["offset"]) == (200, 0, 10)
    assert len(page["items"]) == 5
    assert all(item["url"].startswith(site) for item in page["items"])
    status, text, _ = await fetch(client, f"/{kept['id']}/items", limit="1001")
    assert (status, json.loads(text)["error"]["code"]) == (400, "invalid_query")
    # downloads: every item as JSON lines, and as CSV with the same values
    status, text, headers = await fetch(client, f"/{kept['id']}/items", format="jsonl")
    assert status == 200
    assert headers["Content-Type"] == "application/x-ndjson"
    assert f'filename="job-{kept["id"]}.jsonl"' in headers["Content-Disposition"]
    items = [json.loads(line) for line in text.splitlines()]
    assert len(items) == 200
    assert len({i["url"] for i in items}) == 200
    assert items[10:15] == page["items"]
    status, text, headers = await fetch(client, f"/{kept['id']}/items", format="csv")
    assert (status, headers["Content-Type"]) == (200, "text/csv; charset=utf-8")
    rows = list(csv.DictReader(io.StringIO(text)))
    assert rows == [{"url": i["url"], "title": i["title"]} for i in items]
    code, out, err = await cli(
        monitor.http.url, "items", kept["id"], "--format", "csv", "--offset", "10", "--limit", "5"
    )
    assert code == 0, err
    assert list(csv.DictReader(io.StringIO(out))) == rows[10:15]
    # job_items_max = 50 on e2: 50 kept, the rest counted
    limited = await state_of(client, bounded["id"], "finished", "failed")
    assert (limited["stats"]["items_kept"], limited["stats"]["items_dropped"]) == (50, 150)
    status, text, _ = await fetch(client, f"/{bounded['id']}/items", format="jsonl")
    assert (status, len(text.splitlines())) == (200, 50)


async def test_the_items_path_never_leaves_the_job_directory(
    zk_hosts,
    start_monitor,
    spawn_engine,  # noqa: F811 - the fixture
    site,  # noqa: F811 - the fixture
    tmp_path: Path,
):
    _, client = await steering_engines(zk_hosts, start_monitor, spawn_engine, e1={})
    (job,) = await client.start(spider="walk", args={"site": site})
    await state_of(client, job["id"], "finished")
    status, text, _ = await fetch(client, f"/{job['id']}/items", format="../../secret")
    assert (status, json.loads(text)["error"]["code"]) == (400, "invalid_query")
    # a link the job's own code could have left in its directory leads nowhere
    secret = tmp_path / "secret.jsonl"
    secret.write_text('{"password": "hunter2"}\n')
    items = tmp_path / "e1" / job["id"] / "items.jsonl"
    items.unlink()
    items.symlink_to(secret)
    for params in ({}, {"format": "jsonl"}, {"format": "csv"}):
        status, text, _ = await fetch(client, f"/{job['id']}/items", **params)
        assert (status, json.loads(text)["error"]["code"]) == (404, "no_items")
        assert "hunter2" not in text
    status, _, _ = await fetch(client, "/..%2F..%2Fsecret/items")
    assert status == 404
