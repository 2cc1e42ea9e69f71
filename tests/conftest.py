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
