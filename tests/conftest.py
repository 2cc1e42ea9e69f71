"""Shared fixtures: real servers on loopback, started here and stopped by pid."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from kazoo.client import KazooClient

from netdisco.testing import ZooKeeperServer


@pytest.fixture(scope="session")
def zk_server() -> Iterator[ZooKeeperServer]:
    """One ZooKeeper server (tickTime 500 ms) for the whole session."""
    server = ZooKeeperServer()
    server.start()
    yield server
    server.stop()


@pytest.fixture
def zk_hosts(zk_server: ZooKeeperServer) -> Iterator[str]:
    """A connection string with a fresh chroot, so tests never see each other's nodes."""
    chroot = f"/t-{uuid.uuid4().hex[:12]}"
    admin = KazooClient(hosts=zk_server.hosts)
    admin.start(timeout=15)
    admin.ensure_path(chroot)
    yield f"{zk_server.hosts}{chroot}"
    if zk_server.process is not None:
        admin.delete(chroot, recursive=True)
    admin.stop()
    admin.close()


# -- markers: `pytest -m "not zookeeper"` runs on a machine without Java ------------------

#: fixtures that start a server, and the marker a test using them gets
_SERVER_FIXTURES = {
    "zk_server": "zookeeper",
    "zk_hosts": "zookeeper",
    "redis_server": "redis",
    "redis_url": "redis",
}
#: a module that starts a server itself (not through a fixture) marks all its tests
_SERVER_CALLS = {
    "ZooKeeperServer(": "zookeeper",
    "KazooClient(": "zookeeper",
    "netdisco.demo": "zookeeper",
    "RedisServer(": "redis",
    "RedisClusterServer(": "redis",
}


def _module_markers(path: str, cache: dict[str, set[str]]) -> set[str]:
    if path not in cache:
        with open(path, encoding="utf-8") as handle:
            source = handle.read()
        cache[path] = {marker for call, marker in _SERVER_CALLS.items() if call in source}
    return cache[path]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark each test with the servers it needs, from its fixtures and its module."""
    cache: dict[str, set[str]] = {}
    for item in items:
        names = set(getattr(item, "fixturenames", ()))
        markers = {_SERVER_FIXTURES[n] for n in names & _SERVER_FIXTURES.keys()}
        markers |= _module_markers(str(item.path), cache)
        for marker in sorted(markers):
            item.add_marker(getattr(pytest.mark, marker))
