"""The one ACL policy of the cluster, shared by engines and the monitor.

Without a digest identity everything is ZooKeeper's default (open). With one
(``digest_env``/``digest_file``, the same ``user:password`` for engines and a
monitor that manages tombstones), the root, the tombstone root, every engine
node and every tombstone get: world may read, the identity may do everything.
ZooKeeper checks create and delete on the *parent*, so the roots' ACLs are
what keeps an unauthenticated client from faking or deleting an engine node;
a root that already exists with an open ACL protects nothing, and both the
engine (at start and at each audit: a root can be deleted and re-created open
while engines run, because its own parent may be open) and ``netdisco-monitor
check`` say so; the monitor then trusts no tombstone (:func:`tombstones_trusted`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import structlog
from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NoNodeError
from kazoo.security import ACL, Permissions

from netdisco.cluster.contract import tombstone_root
from netdisco.cluster.settings import DigestCredentials, ZooKeeperSettings
from netdisco.cluster.tombstones import Sweeper, ensure_roots
from netdisco.cluster.zk import wait_result

log = structlog.get_logger(__name__)

#: What the world must not be allowed on a protected root.
_CHANGE = Permissions.CREATE | Permissions.DELETE | Permissions.WRITE | Permissions.ADMIN


def cluster_acl(credentials: DigestCredentials | None) -> list[ACL] | None:
    """The ACL of every node we create; None: ZooKeeper's default (open to all)."""
    return None if credentials is None else credentials.node_acl()


def world_may_change(acls: Iterable[Any]) -> bool:
    """Whether anyone, unauthenticated, may create, delete or write under these ACLs."""
    return any(
        acl.id.scheme == "world" and acl.id.id == "anyone" and acl.perms & _CHANGE for acl in acls
    )


def shut_to(acls: Iterable[Any], credentials: DigestCredentials) -> bool:
    """Whether the cluster's digest identity may not create under these ACLs."""
    ours = {(a.id.scheme, a.id.id) for a in credentials.node_acl() if a.id.scheme == "digest"}
    return not any(
        acl.perms & Permissions.CREATE
        and ((acl.id.scheme, acl.id.id) in ours or acl.id.scheme == "world")
        for acl in acls
    )


async def shut_roots(client: KazooClient, root: str, credentials: DigestCredentials) -> list[str]:
    """The roots where the cluster's identity may not create (re-created by another)."""
    return await _roots_where(client, root, lambda acls: shut_to(acls, credentials))


def shut_root_warning(paths: Iterable[str]) -> str:
    """The one sentence for a root the cluster cannot write under."""
    return (
        f"ZooKeeper ACL of {', '.join(paths)} does not let the digest identity create: "
        "another client re-created it, so engines cannot register or leave a tombstone "
        "(every leave reads as a crash); delete it with that client's rights, or setAcl it "
        "to world:anyone:r plus the digest identity"
    )


async def root_warnings(
    client: KazooClient, root: str, credentials: DigestCredentials
) -> list[str]:
    """What is wrong with the roots' ACLs, with a digest: open to all, or shut to us."""
    warnings = []
    if found := await open_roots(client, root):
        warnings.append(open_root_warning(found))
    if found := await shut_roots(client, root, credentials):
        warnings.append(shut_root_warning(found))
    return warnings


async def open_roots(client: KazooClient, root: str) -> list[str]:
    """The roots (engines', tombstones') that exist with an ACL open to changes."""
    return await _roots_where(client, root, world_may_change)


async def _roots_where(
    client: KazooClient, root: str, wrong: Callable[[list[Any]], bool]
) -> list[str]:
    """The roots (engines', tombstones') that exist with an ACL that is ``wrong``."""
    found = []
    for path in (root, tombstone_root(root)):
        try:
            acls, _ = await wait_result(client.get_acls_async(path))
        except NoNodeError:
            continue
        if wrong(acls):
            found.append(path)
    return found


def open_root_warning(paths: Iterable[str]) -> str:
    """The one sentence both the engine and the monitor log for an open root."""
    return (
        f"ZooKeeper ACL of {', '.join(paths)} lets anyone create or delete engine nodes "
        "although a digest is configured: set it to world:anyone:r plus the digest "
        "identity (setAcl), or delete the empty root so it is re-created protected"
    )


async def tombstones_trusted(client: KazooClient, root: str) -> str | None:
    """Why the tombstones under ``root`` prove nothing (None: they may be trusted).

    With a digest only the identity may create under a protected tombstone root; a
    root open to the world (or gone) lets anyone forge a leave.
    """
    try:
        acls, _ = await wait_result(client.get_acls_async(tombstone_root(root)))
    except NoNodeError:
        return f"{tombstone_root(root)} is missing"
    if world_may_change(acls):
        return f"anyone may create under {tombstone_root(root)} (its ACL is not the digest's)"
    return None


async def acl_warnings(
    client: KazooClient, settings: ZooKeeperSettings, engine_id: str, previous: list[str]
) -> list[str]:
    """An engine's audit of the roots' ACLs (with a digest); logs when the finding changes."""
    credentials = settings.credentials()
    if credentials is None:
        return []
    warnings = await root_warnings(client, settings.root, credentials)
    for warning in warnings:
        if warning not in previous:
            log.warning("zk root acl wrong", engine_id=engine_id, detail=warning)
    return warnings


async def housekeep(client: KazooClient, settings: ZooKeeperSettings, engine_id: str) -> list[str]:
    """An engine's checks at start: its own old tombstones go, an open root is reported.

    Returns the warnings (for the engine's status); never raises a ZooKeeper error.
    """
    warnings: list[str] = []
    try:  # roots made by an older version have no ``keep`` yet
        await ensure_roots(client, settings.root, cluster_acl(settings.credentials()))
    except KazooException as exc:  # a root shut to us: acl_warnings names it
        log.warning("zk roots not ensured", engine_id=engine_id, error=type(exc).__name__)
    try:
        warnings = await acl_warnings(client, settings, engine_id, [])
        sweeper = Sweeper(settings.root, settings.tombstone_max_age, engine_id)
        if deleted := await sweeper.sweep(client):
            log.info("zk old tombstones deleted", engine_id=engine_id, count=deleted)
    except KazooException as exc:
        log.warning("zk housekeeping failed", engine_id=engine_id, error=type(exc).__name__)
    return warnings
