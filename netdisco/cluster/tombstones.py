"""Tombstones: how a graceful leave is told from a crash by ZooKeeper itself.

A graceful leave is one transaction (:func:`leave_transaction`): the ``leaving``
write, a persistent tombstone ``<root>.left/<id>@<czxid hex>`` and the versioned
delete. A reader that lists the root without the node and then asks for the
tombstone (:func:`left_nodes`) needs no clock: ZooKeeper answers a session in
order, so a read sent after that listing sees every transaction the listing
saw, and the tombstone exists exactly when the node left. Tombstones are
deleted by age (their ``ctime``) by :class:`Sweeper`. See
``docs/architecture.md``, "The znode contract".
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Collection, Iterable
from typing import Any

import structlog
from kazoo.client import KazooClient, TransactionRequest
from kazoo.exceptions import BadVersionError, NoAuthError, NodeExistsError, NoNodeError

from netdisco.cluster.contract import (
    engine_path,
    parse_payload,
    tombstone_owner,
    tombstone_path,
    tombstone_root,
)
from netdisco.cluster.membership import Member
from netdisco.cluster.proof import proves_tombstone
from netdisco.cluster.zk import wait_result
from netdisco.exceptions import TombstoneRefused

log = structlog.get_logger(__name__)


def leave_transaction(
    client: KazooClient,
    root: str,
    engine_id: str,
    node: tuple[int, int],
    leaving: bytes,
    acl: Any = None,
) -> TransactionRequest:
    """The graceful leave of node ``(czxid, version)``; the caller commits it.

    Everyone who leaves (the registry, the test fakes) builds it here, so what
    the monitor reads is what engines write.
    """
    czxid, version = node
    path = engine_path(root, engine_id)
    transaction = client.transaction()
    transaction.set_data(path, leaving, version=version)
    transaction.create(tombstone_path(root, engine_id, czxid), leaving, acl=acl)
    transaction.delete(path, version=version + 1)
    return transaction


class Leaver:
    """An engine's graceful leave, retried while its idea of the node is stale."""

    def __init__(self, root: str, engine_id: str, acl: Any = None) -> None:
        self.root = root
        self.engine_id = engine_id
        self.acl = acl

    async def leave(
        self,
        client: KazooClient,
        node: tuple[int, int] | None,
        session_id: int | None,
        leaving: Callable[[int], bytes],
    ) -> None:
        """Leave node ``(czxid, version)`` (None: read it) with the data ``leaving(czxid)``
        gives; three tries, then raise. ``TombstoneRefused``: the node went without one."""
        for _ in range(3):
            if node is None:
                node = await self._own_node(client, session_id)
            if await self._commit(client, node, leaving(node[0])):
                return
            node = None
        raise BadVersionError("our node kept changing while we left")

    async def _own_node(self, client: KazooClient, session_id: int | None) -> tuple[int, int]:
        """``(czxid, version)`` of our node, which must be owned by our session."""
        stat = await wait_result(client.exists_async(engine_path(self.root, self.engine_id)))
        if stat is None or stat.ephemeralOwner != session_id:
            raise NoNodeError("our node is gone or owned by another session")
        return int(stat.czxid), int(stat.version)

    async def _commit(self, client: KazooClient, node: tuple[int, int], leaving: bytes) -> bool:
        """True when applied; False when ``node`` was stale or the tombstone root was gone."""
        transaction = leave_transaction(client, self.root, self.engine_id, node, leaving, self.acl)
        results = await wait_result(transaction.commit_async())
        if isinstance(results[1], NoNodeError):  # someone deleted the tombstone root
            await ensure_roots(client, self.root, self.acl)
            return False
        if isinstance(results[1], NoAuthError):  # re-created by someone, shut to us
            await self._without_tombstone(client, node, leaving)
            raise TombstoneRefused(tombstone_root(self.root))
        if any(isinstance(r, BadVersionError) for r in results):
            return False
        for result in results:
            if isinstance(result, Exception):
                raise result
        return True

    async def _without_tombstone(
        self, client: KazooClient, node: tuple[int, int], leaving: bytes
    ) -> None:
        """The leave rolled back: deregister all the same (it will read as a crash)."""
        version = node[1]
        path = engine_path(self.root, self.engine_id)
        transaction = client.transaction()
        transaction.set_data(path, leaving, version=version)
        transaction.delete(path, version=version + 1)
        for result in await wait_result(transaction.commit_async()):
            if isinstance(result, Exception):
                raise result


async def ensure_path(client: KazooClient, path: str, acl: Any = None) -> None:
    """Create ``path`` one level at a time with ``acl``; a concurrent creator is no error.

    Raises ``NoNodeError`` when the chroot of the connection string is missing.
    """
    parts = path.strip("/").split("/")
    for depth in range(1, len(parts) + 1):
        try:
            await wait_result(client.create_async("/" + "/".join(parts[:depth]), b"", acl=acl))
        except NodeExistsError:
            continue


#: a child that keeps the tombstone root from ever being empty: ZooKeeper deletes only
#: empty nodes, so no client without the cluster's identity can delete and re-create it
#: (its parent is often ``/``, open to all). Not a tombstone name (no ``@``).
KEEP = "keep"


async def ensure_roots(client: KazooClient, root: str, acl: Any = None) -> None:
    """The engines' root and the tombstone root (never empty: ``KEEP``), with the
    cluster's ACL."""
    await ensure_path(client, root, acl)
    await ensure_path(client, f"{tombstone_root(root)}/{KEEP}", acl)


async def left_nodes(
    client: KazooClient, root: str, nodes: Iterable[tuple[str, int]], key: bytes | None = None
) -> set[tuple[str, int]]:
    """Those of ``(engine id, czxid)`` whose tombstone exists: they left gracefully. With
    ``key``, only those whose tombstone proves it (netdisco.cluster.proof).

    Call it after the listing that lacks the nodes (see the module docstring).
    """
    wanted = list(nodes)
    if key is None:
        stats = await asyncio.gather(
            *(wait_result(client.exists_async(tombstone_path(root, n, c))) for n, c in wanted)
        )
        return {node for node, stat in zip(wanted, stats, strict=True) if stat is not None}
    read = await asyncio.gather(
        *(wait_result(client.get_async(tombstone_path(root, n, c))) for n, c in wanted),
        return_exceptions=True,
    )
    proven = set()
    for (name, czxid), result in zip(wanted, read, strict=True):
        if isinstance(result, NoNodeError):
            continue
        if isinstance(result, BaseException):
            raise result
        data = parse_payload(result[0])
        if proves_tombstone(key, data.left_proof, name, czxid):
            proven.add((name, czxid))
        else:
            meaning = "a forged or foreign tombstone: the leave reads as a crash"
            log.warning("tombstone_unproven", engine_id=name, czxid=f"{czxid:x}", meaning=meaning)
    return proven


def leave_proven(key: bytes | None, member: Member) -> bool:
    """Whether a gone node's last ``leaving`` data proves its leave (always, with no key)."""
    if key is None:
        return True
    return proves_tombstone(key, member.payload.left_proof, member.name, member.czxid)


async def who_left(
    client: KazooClient,
    root: str,
    members: Iterable[Member],
    departing: Collection[str],
    key: bytes | None = None,
) -> set[tuple[str, int]]:
    """The gone ``members`` (see ``membership.gone``) that left gracefully.

    Engines of contract 2 by their tombstone (exact; with ``key``, a proven one: an
    engine of contract 2 has none); older ones by the names ``departing`` that the
    caller's ``netdisco.cluster.legacy`` times give.
    """
    members = list(members)
    modern = [(m.name, m.czxid) for m in members if m.payload.tombstones]
    left = await left_nodes(client, root, modern, key) if modern else set()
    legacy = {(m.name, m.czxid) for m in members if not m.payload.tombstones}
    return left | {node for node in legacy if node[0] in departing}


class Sweeper:
    """Deletes tombstones older than ``max_age`` (by ``ctime``); remembers what it read.

    A tombstone's ``ctime`` never changes, so each name is read once however
    often the sweep runs. ``engine_id`` limits the sweep to one engine's own.
    """

    def __init__(self, root: str, max_age: float, engine_id: str | None = None) -> None:
        self.root = root
        self.max_age = max_age
        self.engine_id = engine_id
        self.deleted = 0
        self._ctimes: dict[str, float] = {}

    async def sweep(self, client: KazooClient) -> int:
        """One pass; returns how many were deleted. ``NoAuthError`` is the caller's."""
        base = tombstone_root(self.root)
        try:
            names = await wait_result(client.get_children_async(base))
        except NoNodeError:
            return 0
        mine = [n for n in names if self._wanted(n)]
        present = set(mine)
        self._ctimes = {n: t for n, t in self._ctimes.items() if n in present}
        await self._read_ctimes(client, base, [n for n in mine if n not in self._ctimes])
        cutoff = time.time() - self.max_age
        old = [n for n in mine if self._ctimes.get(n, cutoff + 1) <= cutoff]
        results = await asyncio.gather(
            *(wait_result(client.delete_async(f"{base}/{n}")) for n in old),
            return_exceptions=True,
        )
        for name, result in zip(old, results, strict=True):
            if isinstance(result, BaseException) and not isinstance(result, NoNodeError):
                raise result
            self._ctimes.pop(name, None)
        self.deleted += len(old)
        return len(old)

    def _wanted(self, name: str) -> bool:
        owner = tombstone_owner(name)
        return owner is not None and self.engine_id in (None, owner[0])

    async def _read_ctimes(self, client: KazooClient, base: str, names: list[str]) -> None:
        stats = await asyncio.gather(
            *(wait_result(client.exists_async(f"{base}/{n}")) for n in names)
        )
        for name, stat in zip(names, stats, strict=True):
            if stat is not None:
                self._ctimes[name] = stat.ctime / 1000.0
