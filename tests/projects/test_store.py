"""What a reader of ZooKeeper trusts of a stored version: nothing it did not check."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError

from netdisco.cluster.settings import DigestCredentials
from netdisco.cluster.zk import wait_result
from netdisco.exceptions import ProjectUnavailable
from netdisco.projects.archive import inspect, pack
from netdisco.projects.store import CHUNK, ProjectStore, parse_version
from tests.projects.support import kazoo, write_project

ROOT = "/netdiscovery"
GOOD = {"size": 10, "chunks": 1, "kind": "directory", "spiders": ["a.b:C"]}


@pytest.mark.parametrize(
    "body",
    [
        b"not json",
        b"[1]",
        json.dumps(GOOD | {"size": -1}).encode(),
        json.dumps(GOOD | {"size": 1 << 40, "chunks": (1 << 40) // CHUNK}).encode(),
        json.dumps(GOOD | {"chunks": 99}).encode(),
        json.dumps(GOOD | {"spiders": []}).encode(),
        json.dumps(GOOD | {"spiders": ["os.system('x')"]}).encode(),
        json.dumps(GOOD | {"spiders": 5}).encode(),
        json.dumps(GOOD | {"kind": "wheel"}).encode(),  # a wheel without its file name
        json.dumps(GOOD | {"kind": "wheel", "filename": "../../x.whl"}).encode(),
        json.dumps(GOOD | {"label": "a/b"}).encode(),
        b"{" * 100_000,
    ],
)
def test_a_version_node_out_of_bounds_is_refused(body: bytes) -> None:
    with pytest.raises(ProjectUnavailable):
        parse_version("/p", "a" * 64, body, 1)


def test_a_version_node_not_named_by_a_hash_is_refused() -> None:
    with pytest.raises(ProjectUnavailable):
        parse_version("/p", "../x", json.dumps(GOOD).encode(), 1)


async def test_an_altered_chunk_is_an_error_not_another_project(
    zk_hosts: str, tmp_path: Path
) -> None:
    data = pack(write_project(tmp_path / "p"))
    async with kazoo(zk_hosts) as client:
        store = ProjectStore(client, ROOT)
        version, _ = await store.put("docs", data, inspect(data, 1 << 20), None)
        chunk = f"{ROOT}.projects/docs/archives/{version.id}/0000"
        await wait_result(client.set_async(chunk, data[:-1] + b"x"))
        with pytest.raises(ProjectUnavailable, match="hash"):
            await store.read("docs", None)


async def test_with_a_digest_only_the_identity_changes_projects(
    zk_hosts: str, tmp_path: Path
) -> None:
    credentials = DigestCredentials(user="deployer", password="s3cret")
    data = pack(write_project(tmp_path / "p"))
    owner = KazooClient(hosts=zk_hosts, auth_data=credentials.auth_data)
    owner.start(15)
    try:
        store = ProjectStore(owner, ROOT, credentials.node_acl())
        version, _ = await store.put("docs", data, inspect(data, 1 << 20), None)
        async with kazoo(zk_hosts) as stranger:
            store = ProjectStore(stranger, ROOT)
            assert (await store.read("docs", None))[1] == data  # the world may read
            with pytest.raises(NoAuthError):
                await store.delete("docs", version.id)
            with pytest.raises(NoAuthError):
                await store.set_default("docs", version.id)
    finally:
        owner.delete(f"{ROOT}.projects", recursive=True)  # the test's chroot is open
        owner.stop()
        owner.close()
