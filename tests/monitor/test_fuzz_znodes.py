"""Fuzzing what engines write into ZooKeeper: random bytes and random JSON objects.

``parse_payload`` never raises; and a real monitor watching a real ZooKeeper
server, fed nodes holding such data, keeps its view, its HTTP answers and its
event descriptions (what e-mails say) working.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import Iterator
from typing import Any

import aiohttp
import pytest
from hypothesis import given
from hypothesis import strategies as st
from kazoo.client import KazooClient

from monitor.hooks import describe
from netdisco.cluster.contract import parse_payload
from netdisco.testing import eventually
from tests.fuzzing import examples
from tests.monitor.conftest import monitor_config

pytestmark = pytest.mark.fuzz

_scalar = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=30)
_json: st.SearchStrategy[Any] = st.recursive(
    _scalar,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner),
    max_leaves=15,
)
_fields = st.sampled_from(
    [
        "id",
        "incarnation",
        "host",
        "port",
        "status_url",
        "pid",
        "started_at",
        "spiders",
        "state",
        "stalled",
        "loop_lag",
        "facts",
    ]
)
_objects = st.dictionaries(_fields | st.text(max_size=10), _json, max_size=9)
_data = st.one_of(
    st.binary(max_size=400),
    _objects.map(lambda o: json.dumps(o).encode()),
    st.integers(1, 3_000).map(lambda depth: b'{"a":' * depth + b"1" + b"}" * depth),
)


@examples(100)
@given(raw=st.one_of(st.none(), _data))
def test_parse_payload_never_raises(raw: bytes | None) -> None:
    payload = parse_payload(raw)
    assert payload.garbage in (True, False)


@pytest.fixture
def writer(zk_hosts: str) -> Iterator[KazooClient]:
    client = KazooClient(hosts=zk_hosts)
    client.start(timeout=15)
    client.ensure_path("/netdiscovery")
    yield client
    client.stop()
    client.close()


_names = itertools.count()


#: kazoo's own threads use the random module while hypothesis draws: not the strategy's doing
@pytest.mark.filterwarnings("ignore::hypothesis.errors.HypothesisDeprecationWarning")
@examples(25)
@given(raw=_data)
async def test_the_monitor_survives_any_node_data(
    zk_hosts: str, start_monitor: Any, writer: KazooClient, raw: bytes
) -> None:
    config = monitor_config(zk_hosts)
    if not hasattr(writer, "monitor"):  # one monitor for every example
        writer.monitor = await start_monitor(config)
    monitor, rec = writer.monitor
    name = f"fuzz-{next(_names)}"
    await asyncio.to_thread(writer.create, f"/netdiscovery/{name}", raw, ephemeral=True)
    joined = await eventually(lambda: rec.of("engine_joined", name), "the node is seen")
    assert all(isinstance(describe(event), str) for event in joined)
    assert name in {e["id"] for e in monitor.snapshot()["engines"]}
    url = f"{monitor.http.url}/netdiscovery/monitor"
    async with aiohttp.ClientSession() as session, session.get(url) as response:
        assert response.status == 200
        await response.json()
    await asyncio.to_thread(writer.delete, f"/netdiscovery/{name}")
    left = await eventually(lambda: rec.of("engine_lost", name) or rec.of("engine_left", name))
    assert all(isinstance(describe(event), str) for event in left)
