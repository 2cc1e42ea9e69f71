"""Helpers for the registration tests: a thread-guarded kazoo client, polling, reading nodes."""

from __future__ import annotations

import asyncio
import functools
import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from netdisco.cluster.contract import EnginePayload, payload_from_dict
from netdisco.cluster.zk import on_kazoo_thread, wait_result

#: Every KazooClient method our code could call; each is checked for the calling thread.
GUARDED = (
    "start", "start_async", "stop", "close", "restart", "add_listener", "remove_listener",
    "create", "create_async", "ensure_path", "ensure_path_async", "exists", "exists_async",
    "get", "get_async", "set", "set_async", "delete", "delete_async",
    "get_children", "get_children_async", "get_acls", "get_acls_async", "sync", "sync_async",
    "transaction",
)  # fmt: skip


@dataclass
class Guard:
    """Records kazoo calls; a call from a kazoo thread is a violation."""

    violations: list[str] = field(default_factory=list)
    calls: list[tuple[str, tuple[Any, ...]]] = field(default_factory=list)
    clients: list[KazooClient] = field(default_factory=list)

    def wrap(self, client: KazooClient) -> KazooClient:
        """Shadow each guarded method of ``client`` with a checking wrapper."""
        for name in GUARDED:
            setattr(client, name, self._checked(name, getattr(client, name)))
        self.clients.append(client)
        return client

    def _checked(self, name: str, method: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(method)
        def checked(*args: Any, **kwargs: Any) -> Any:
            if on_kazoo_thread():
                self.violations.append(f"{name} called from a kazoo thread")
            self.calls.append((name, args))
            return method(*args, **kwargs)

        return checked

    def factory(self, **kwargs: Any) -> KazooClient:
        """A ``client_factory`` for ``Registration``."""
        return self.wrap(KazooClient(**kwargs))

    def count(self, name: str, path: str | None = None) -> int:
        """How many calls of ``name`` were made (on ``path``, when given)."""
        return sum(1 for called, args in self.calls if called == name and path in (None, args[0]))


@dataclass(frozen=True)
class Node:
    data: dict[str, Any]
    owner: int
    czxid: int
    version: int


async def read_node(client: KazooClient, path: str) -> Node | None:
    """The node's JSON data and stat as an observer sees them, or None."""
    try:
        raw, stat = await wait_result(client.get_async(path))
    except NoNodeError:
        return None
    return Node(json.loads(raw.decode()), stat.ephemeralOwner, stat.czxid, stat.version)


class Describe:
    """A ``describe`` callable like the engine's, with a fresh incarnation; mutate ``data``."""

    def __init__(self, engine_id: str, **extra: Any) -> None:
        self.data: dict[str, Any] = {
            "id": engine_id,
            "incarnation": uuid.uuid4().hex,
            "host": "127.0.0.1",
            "port": 8715,
            "status_url": "http://127.0.0.1:8715/netdiscovery/engine",
            "pid": 4242,
            "version": "0.1.0",
            "started_at": 1767225600.0,
            "spiders": [],
            **extra,
        }

    def __call__(self) -> EnginePayload:
        return payload_from_dict(self.data)


async def hijack_session(hosts: str, client_id: tuple[int, bytes]) -> None:
    """Force expiry of a live session: connect with its id and password, then close."""

    def run() -> None:
        thief = KazooClient(hosts=hosts, client_id=client_id, timeout=2.0)
        thief.start(timeout=10)
        thief.stop()
        thief.close()

    await asyncio.to_thread(run)
