"""Fake engines for the monitor's tests and benchmark: plain kazoo clients.

They write exactly what real engines write (``docs/architecture.md``, "The znode
contract"): an ephemeral ``<root>/<engine_id>`` with an ``EnginePayload``, and a
graceful leave built by the same function as the registry's
(``netdisco.cluster.tombstones.leave_transaction``: ``leaving`` write, tombstone,
versioned delete). ``legacy=True`` plays an engine of contract 1 (no
tombstone). Used in-process (sync, call through ``asyncio.to_thread``) or as a
subprocess::

    python -m tests.monitor.fake_engines serve HOSTS ROOT ENGINE_ID [--timeout S]
    python -m tests.monitor.fake_engines churn HOSTS ROOT PREFIX --engines N --ops K

``serve`` prints ``ready`` once registered and leaves gracefully on SIGTERM.
``churn`` runs N engines (a kazoo client each, in threads) doing K random
joins, leaves, restarts and updates each, prints one JSON line with the true
number of creates and deletes and the nodes it holds, then keeps its sessions
open until stdin closes.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sys
import threading
import time
import uuid
from collections import Counter
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NodeExistsError
from kazoo.retry import KazooRetry

from netdisco.cluster.contract import CONTRACT, tombstone_root
from netdisco.cluster.proof import engine_proof, proof_key, tombstone_proof
from netdisco.cluster.tombstones import leave_transaction

_TALLY_LOCK = threading.Lock()
#: the engine token of the tests' clusters: monitors send it, fake engines prove with it
ENGINE_TOKEN = "engine-tok-0123456789"


def engine_data(
    engine_id: str,
    state: str = "running",
    *,
    legacy: bool = False,
    signer: tuple[bytes, int] | None = None,
    **extra: Any,
) -> bytes:
    """The znode data of an engine, as the registration contract fixes it; ``signer``
    (key, session) proves it as an engine of a cluster with a token does."""
    data: dict[str, Any] = {
        "id": engine_id,
        "incarnation": uuid.uuid4().hex,
        "host": "127.0.0.1",
        "port": 8715,
        "status_url": f"http://127.0.0.1:8715/netdiscovery/engine#{engine_id}",
        "pid": os.getpid(),
        "version": "0.1.0",
        "started_at": time.time(),
        "spiders": [{"name": "quotes", "state": "running"}],
        "state": state,
        **({} if legacy else {"contract": CONTRACT}),
        **extra,
    }
    if signer is not None:
        key, session = signer
        data["proof"] = engine_proof(key, engine_id, data["status_url"], session)
    return json.dumps(data).encode()


class FakeEngine:
    """One engine registration on its own session (synchronous kazoo)."""

    def __init__(
        self,
        hosts: str,
        root: str,
        engine_id: str,
        timeout: float = 1.0,
        client: KazooClient | None = None,
        *,
        legacy: bool = False,
        token: str | None = None,
        retry_forever: bool = False,
    ) -> None:
        """``client``: share a session with other fake engines (the churn benchmark);
        ``token``: the cluster's engine token, whose proofs it writes; ``retry_forever``:
        reconnect as engines do (netdisco.cluster.zk), where kazoo's default gives up on a
        server that restarts slowly and the session then expires for real."""
        self.key = None if legacy else proof_key(token)
        self.root = root
        self.path = f"{root.rstrip('/')}/{engine_id}"
        self.engine_id = engine_id
        self.legacy = legacy
        self.node: tuple[int, int] = (0, 0)  # czxid, version of our node
        self.shared = client is not None
        retry = KazooRetry(max_tries=-1, delay=0.05, max_delay=1.0) if retry_forever else None
        self.client = client or KazooClient(hosts=hosts, timeout=timeout, connection_retry=retry)
        if not self.shared:
            self.client.start(timeout=15)
        self.data = b""

    def join(self, **extra: Any) -> int:
        """Create the node (and the tombstone root, as the registry does); return its czxid."""
        self.data = engine_data(self.engine_id, legacy=self.legacy, signer=self._signer(), **extra)
        if not self.legacy:
            self.client.retry(self.client.ensure_path, tombstone_root(self.root))
        # a 1 s session on a loaded machine may lose its connection mid-call: retried, and a
        # create that landed before the loss is found, not made twice
        stat = self.client.retry(self._create)
        self.node = (stat.czxid, stat.version)
        return int(stat.czxid)

    def _create(self) -> Any:
        try:
            _, stat = self.client.create(
                self.path, self.data, ephemeral=True, makepath=True, include_data=True
            )
        except NodeExistsError:
            _, stat = self.client.get(self.path)
        return stat

    def _signer(self) -> tuple[bytes, int] | None:
        session = self.client.client_id
        return None if self.key is None or session is None else (self.key, session[0])

    def update(self, **extra: Any) -> None:
        self.data = engine_data(self.engine_id, legacy=self.legacy, signer=self._signer(), **extra)
        stat = self.client.set(self.path, self.data)
        self.node = (self.node[0], stat.version)

    def leave(self) -> None:
        """Graceful, as the registry leaves (contract 1: ``leaving`` write and delete only)."""
        data = json.loads(self.data)
        data["state"] = "leaving"
        if self.key is not None:
            data["left_proof"] = tombstone_proof(self.key, self.engine_id, self.node[0])
        leaving = json.dumps(data).encode()
        self.client.retry(self._commit_leave, leaving)

    def _commit_leave(self, leaving: bytes) -> None:
        """One try of the leave; retried when the 1 s session loses its connection, and
        one that landed before the loss (the node is gone) is not made again."""
        if self.client.exists(self.path) is None:
            return
        if self.legacy:
            transaction = self.client.transaction()
            transaction.set_data(self.path, leaving)
            transaction.delete(self.path)
        else:
            transaction = leave_transaction(
                self.client, self.root, self.engine_id, self.node, leaving
            )
        for result in transaction.commit():
            if isinstance(result, Exception):
                raise result

    def vanish(self) -> None:
        """Delete without writing ``leaving``: looks like a loss to the monitor."""
        self.client.delete(self.path)

    def close(self) -> None:
        if not self.shared:
            self.client.stop()
            self.client.close()


def _serve(args: argparse.Namespace) -> None:
    engine = FakeEngine(args.hosts, args.root, args.engine_id, args.timeout)
    engine.join()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    print("ready", flush=True)
    stop.wait()
    engine.leave()
    engine.close()


def _churn_one(
    engine: FakeEngine,
    ops: int,
    rng: random.Random,
    tally: dict[str, int],
    graceful_only: bool = False,
    pause: float = 0.01,
) -> None:
    """Random joins, leaves, restarts (unless graceful_only) and updates; counts them.

    An operation that fails (ZooKeeper overloaded) ends this engine with its
    outcome unknown: ``errors`` says the totals can no longer be trusted.
    """
    present = False
    counts = Counter[str]()
    try:
        for _ in range(ops):
            roll = rng.random()
            if not present:
                engine.join()
                counts["creates"] += 1
                present = True
            elif roll < 0.35:
                engine.leave()
                counts.update(deletes=1, leaves=1)
                present = False
            elif roll < 0.6 and not graceful_only:  # restart: gone and back, if we are quick
                engine.vanish()
                engine.join()
                counts.update(creates=1, deletes=1)
            else:
                engine.update(tick=rng.random())
            time.sleep(rng.random() * pause)
    except KazooException:
        counts["errors"] += 1
    with _TALLY_LOCK:
        for key, value in counts.items():
            tally[key] += value


def _churn(args: argparse.Namespace) -> None:
    clients = []
    for _ in range(0, args.engines, args.per_client):
        clients.append(KazooClient(hosts=args.hosts, timeout=args.timeout))
        clients[-1].start(timeout=15)
    engines = [
        FakeEngine(args.hosts, args.root, f"{args.prefix}{i}", client=clients[i // args.per_client])
        for i in range(args.engines)
    ]
    print("ready", flush=True)
    sys.stdin.readline()  # "go"
    tally = {"creates": 0, "deletes": 0, "leaves": 0, "errors": 0}
    threads = [
        threading.Thread(
            target=_churn_one,
            args=(
                e,
                args.ops,
                random.Random(f"{args.prefix}{i}"),
                tally,
                args.graceful_only,
                args.pause,
            ),
        )
        for i, e in enumerate(engines)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    held = {}
    for engine in engines:
        stat = engine.client.exists(engine.path)
        if stat is not None:
            held[engine.engine_id] = stat.czxid
    print(json.dumps({**tally, "held": held}), flush=True)
    sys.stdin.readline()  # hold the sessions until told
    for client in clients:
        client.stop()
        client.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="mode", required=True)
    serve = sub.add_parser("serve")
    serve.add_argument("hosts")
    serve.add_argument("root")
    serve.add_argument("engine_id")
    serve.add_argument("--timeout", type=float, default=1.0)
    churn = sub.add_parser("churn")
    churn.add_argument("hosts")
    churn.add_argument("root")
    churn.add_argument("prefix")
    churn.add_argument("--engines", type=int, default=50)
    churn.add_argument("--ops", type=int, default=20)
    churn.add_argument("--timeout", type=float, default=10.0)
    churn.add_argument("--per-client", type=int, default=1, help="engines sharing a session")
    churn.add_argument("--graceful-only", action="store_true", help="no delete without leaving")
    churn.add_argument("--pause", type=float, default=0.01, help="at most this long between ops")
    args = parser.parse_args()
    {"serve": _serve, "churn": _churn}[args.mode](args)


if __name__ == "__main__":
    main()
