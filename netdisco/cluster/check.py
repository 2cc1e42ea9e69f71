"""What ``netdisco check`` and ``netdisco-monitor check CONFIG`` verify before a start.

One module for both commands, so an engine and a monitor are judged alike: ZooKeeper
answers (with the digest identity, and a root whose ACL lets that identity create and
delete engine nodes, and is not open to the world while a digest is configured), a
port is free to bind, a directory is writable. Each check is bounded by ``timeout``
and ends in one ``Finding``; ``report`` prints one line each and gives the exit status.
The engine's own checks (Redis, spider imports) live in ``netdisco.check``.
"""

from __future__ import annotations

import asyncio
import os
import socket
import tempfile
from collections.abc import Callable, Coroutine, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NoNodeError
from kazoo.hosts import collect_hosts
from kazoo.retry import KazooRetry
from kazoo.security import ACL, Permissions

from netdisco.cluster.acl import open_root_warning, root_warnings, world_may_change
from netdisco.cluster.settings import DigestCredentials, ZooKeeperSettings
from netdisco.cluster.zk import close_client, wait_result
from netdisco.exceptions import NetdiscoError

#: seconds a network check may take, unless told otherwise
TIMEOUT = 3.0

#: what an engine (or a monitor managing tombstones) does under the root
_NEEDED = Permissions.CREATE | Permissions.DELETE


@dataclass(frozen=True)
class Finding:
    """One check's outcome: ``what`` was checked, ``problem`` (None: ok), and a few words."""

    what: str
    said: str
    problem: bool = False
    warning: bool = False  # said, but no reason not to start

    def line(self) -> str:
        kind = "problem" if self.problem else "warning" if self.warning else "ok"
        return f"{kind}: {self.what}: {self.said}"


def ok(what: str, said: str) -> Finding:
    return Finding(what, said)


def problem(what: str, said: str) -> Finding:
    return Finding(what, said, problem=True)


def warning(what: str, said: str) -> Finding:
    return Finding(what, said, warning=True)


#: what any client that reaches ZooKeeper can do to a cluster without a digest
OPEN_CLUSTER = (
    "any client that reaches ZooKeeper can advertise a fake engine, delete an engine's node "
    "or the roots, and write a tombstone"
)


def trust(settings: ZooKeeperSettings, token: str | None, *, prefix: str) -> Finding:
    """What the configuration lets an anonymous ZooKeeper client do (netdisco.cluster.proof):
    a digest fences writes, the engine token proves nodes and tombstones."""
    what = "cluster trust"
    digest = settings.digest_env or settings.digest_file
    if digest and token:
        return ok(what, "digest ACL and proven nodes and tombstones (engine token)")
    if token:
        return warning(what, f"no digest: {OPEN_CLUSTER}; the engine token's proofs keep "
                       "fake engines from the token and forged tombstones from hiding a crash, "
                       "but a deleted node or root still reads as a crash")  # fmt: skip
    if digest:
        return warning(what, "no engine token: nodes and tombstones carry no proof; the digest "
                       "keeps anonymous clients from writing them")  # fmt: skip
    return warning(what, f"no digest and no engine token: {OPEN_CLUSTER} that makes a "
                   "SIGKILLed engine read as engine_left (no alert); set zookeeper.digest_env "
                   "and the engine token (docs/security.md)")  # fmt: skip


Check = Callable[[], Coroutine[Any, Any, list[Finding]]]


def settled(findings: list[Finding]) -> Check:
    """A check that needed no waiting (an import, a directory), run with the others."""

    async def check() -> list[Finding]:
        return findings

    return check


async def run(checks: Iterable[Check]) -> list[Finding]:
    """Every check at once (each bounds itself); their findings in the order given."""
    async with asyncio.TaskGroup() as group:
        tasks = [group.create_task(check()) for check in checks]
    return [finding for task in tasks for finding in task.result()]


def report(findings: Sequence[Finding], out: TextIO) -> int:
    """One line per finding; 1 when any is a problem, else 0."""
    for finding in findings:
        print(finding.line(), file=out)
    return 1 if any(f.problem for f in findings) else 0


async def zookeeper(settings: ZooKeeperSettings, *, prefix: str, timeout: float) -> list[Finding]:
    """ZooKeeper answers within ``timeout`` with the configured identity, and its root
    lets that identity register (and no one else, when a digest is configured)."""
    address, _, chroot = settings.hosts.partition("/")
    what = f"zookeeper {address}"
    try:
        credentials = settings.credentials(prefix=prefix)
    except NetdiscoError as exc:
        return [problem(what, str(exc))]
    refused = await _refused(address, timeout)
    if refused:
        return [problem(what, refused)]
    client = KazooClient(
        hosts=address,
        timeout=max(timeout, 1.0),
        connection_retry=KazooRetry(max_tries=-1, delay=0.05, max_delay=0.5),
        auth_data=None if credentials is None else credentials.auth_data,
    )
    try:
        connected = client.start_async()
        if not await asyncio.to_thread(connected.wait, timeout) or not client.connected:
            return [problem(what, f"unreachable (no answer within {timeout:g} s)")]
        async with asyncio.timeout(timeout):
            return [await _root(client, f"/{chroot}" if chroot else "", settings.root,
                                credentials, what)]  # fmt: skip
    except (KazooException, TimeoutError) as exc:
        return [problem(what, f"{type(exc).__name__} while reading {settings.root}")]
    finally:
        await asyncio.to_thread(close_client, client)


async def _refused(address: str, timeout: float) -> str:
    """Why no server of ``address`` can be reached at all, when each says so at once (a
    refused connection: nothing listens there); '' when one may answer, or is slow to."""
    try:
        servers, _ = collect_hosts(address)
    except ValueError:
        return ""  # kazoo's own client says what is wrong with the address
    reasons = []
    for host, port in servers:
        try:
            async with asyncio.timeout(timeout):
                _, writer = await asyncio.open_connection(host, port)
        except TimeoutError:
            return ""  # slow, not refused: the client's wait tells
        except OSError as exc:  # asyncio's strerror holds the address: say it by errno
            said = os.strerror(exc.errno) if exc.errno else type(exc).__name__
            reasons.append(f"{host}:{port} {said.lower()}")
            continue
        writer.close()
        return ""
    return f"unreachable: {'; '.join(reasons)} (nothing listens there: is the port right?)"


async def _root(
    client: KazooClient,
    chroot: str,
    root: str,
    credentials: DigestCredentials | None,
    what: str,
) -> Finding:
    if chroot and await wait_result(client.exists_async(chroot)) is None:
        return problem(what, f"the chroot {chroot} in zookeeper.hosts is missing")
    path = chroot + root
    try:
        acls, _ = await wait_result(client.get_acls_async(path))
    except NoNodeError:
        return ok(what, f"reachable; {root} will be created at the first start")
    refused = _refusal(acls, credentials, root)
    if not refused and credentials is not None:
        refused = "; ".join(await root_warnings(client, path, credentials))
    if refused:
        return problem(what, refused)
    auth = "digest auth" if credentials else "no auth"
    return ok(what, f"reachable, {auth}; {root} lets this identity register")


def _refusal(acls: Sequence[ACL], credentials: DigestCredentials | None, root: str) -> str:
    """Why the root's ACL does not fit the configuration ('' when it does)."""
    if credentials is not None and world_may_change(acls):
        return open_root_warning([root])
    mine = [acl.id for acl in credentials.node_acl() if acl.id.scheme == "digest"] \
        if credentials else []  # fmt: skip
    for acl in acls:
        anyone = acl.id.scheme == "world" and acl.id.id == "anyone"
        if (anyone or acl.id in mine) and acl.perms & _NEEDED == _NEEDED:
            return ""
    who = f"digest identity {credentials.user!r}" if credentials else "a client without digest"
    return f"the ACL of {root} does not let {who} create and delete engine nodes"


async def port_free(what: str, host: str, port: int) -> list[Finding]:
    """``host:port`` can be bound now, as the HTTP server binds it (address reuse on)."""
    where = f"{what} {host}:{port}"
    if port == 0:
        return [ok(where, "any free port is taken at start")]
    try:
        infos = await asyncio.wait_for(
            asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM), TIMEOUT
        )
        family, kind, proto, _, address = infos[0]
        with socket.socket(family, kind, proto) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(address)
    except (OSError, TimeoutError) as exc:
        return [problem(where, f"cannot bind: {exc.strerror or type(exc).__name__}")]
    return [ok(where, "free")]


def writable_dir(what: str, path: str | Path) -> list[Finding]:
    """``path`` is a directory we may write in, or can be made under one we may."""
    where = f"{what} {path}"
    target = Path(path)
    existing = next((p for p in (target, *target.parents) if p.exists()), None)
    if existing is None or not existing.is_dir():
        return [problem(where, f"{existing or target} is not a directory")]
    try:
        with tempfile.NamedTemporaryFile(dir=existing, prefix=".netdisco-check-"):
            pass
    except OSError as exc:
        return [problem(where, f"not writable: {exc.strerror or exc}")]
    if existing != target:
        return [ok(where, f"will be created (under {existing}, writable)")]
    return [ok(where, "writable")]
