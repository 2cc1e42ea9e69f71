"""A Redis Cluster on loopback for failover tests: six ``RedisServer`` child processes."""

from __future__ import annotations

import itertools
import subprocess
import time
from typing import Self

from netdisco._servers import RedisServer


class RedisClusterServer:
    """A Redis Cluster on loopback: ``masters`` masters with one replica each, every node
    a ``RedisServer`` child process (stopped by pid) with its own temporary directory.

    ``node_timeout_ms`` is short so that a killed master's replica takes over in seconds.
    """

    def __init__(self, masters: int = 3, *, node_timeout_ms: int = 1000) -> None:
        self.nodes = [RedisServer(cluster_timeout_ms=node_timeout_ms) for _ in range(2 * masters)]

    @property
    def url(self) -> str:
        """The ``frontier`` setting that names this cluster (every node as a seed)."""
        seeds = ",".join(f"{n.host}:{n.port}" for n in self.nodes)
        return f"redis+cluster://{seeds}/0"

    def start(self, timeout: float = 60.0) -> None:
        """Start and join the nodes, wait until served; if that fails, stop them."""
        try:
            for node in self.nodes:
                node.start()
            seeds = [f"{n.host}:{n.port}" for n in self.nodes]
            subprocess.run(
                ["redis-cli", "--cluster", "create", *seeds, "--cluster-replicas", "1",
                 "--cluster-yes"],
                check=True, capture_output=True, timeout=timeout,
            )  # fmt: skip
            self.wait_ok(timeout)
        except BaseException:
            self.stop()
            raise

    def cli(self, node: RedisServer, *args: str) -> str:
        """A command's reply from one node, as ``redis-cli`` prints it."""
        argv = ["redis-cli", "-h", node.host, "-p", str(node.port), *args]
        return subprocess.run(argv, capture_output=True, text=True, timeout=10).stdout

    def live(self) -> list[RedisServer]:
        """The nodes whose process runs."""
        return [n for n in self.nodes if n.process is not None and n.process.poll() is None]

    def masters(self) -> list[RedisServer]:
        """The live nodes that serve slots as masters now."""
        return [n for n in self.live() if "role:master" in self.cli(n, "info", "replication")]

    def master_of(self, key: str) -> RedisServer:
        """The live node that serves ``key``'s slot as master now."""
        slot = int(self.cli(self.live()[0], "cluster", "keyslot", key))
        for line in self.cli(self.live()[0], "cluster", "nodes").splitlines():
            fields = line.split()
            address, flags, link = fields[1], fields[2], fields[7]
            ranges = [r.split("-") for r in fields[8:] if not r.startswith("[")]
            if (
                "master" in flags
                and link == "connected"
                and any(int(r[0]) <= slot <= int(r[-1]) for r in ranges)
            ):
                port = int(address.split("@")[0].rsplit(":", 1)[1])
                return next(n for n in self.live() if n.port == port)
        raise LookupError(f"no live master serves slot {slot}")

    def replica_of(self, master: RedisServer) -> RedisServer:
        """The live node that replicates ``master`` now."""
        lines = [line.split() for line in self.cli(self.live()[0], "cluster", "nodes").splitlines()]
        ports = {f[0]: int(f[1].split("@")[0].rsplit(":", 1)[1]) for f in lines}
        found = {ports[f[0]] for f in lines if "slave" in f[2] and ports.get(f[3]) == master.port}
        return next(node for node in self.live() if node.port in found)

    def is_ok(self) -> bool:
        """Every live node says ``cluster_state:ok``, every live replica is in sync, and
        every node lists every live replica as online (clients learn them from any node)."""
        replicas = 0
        for node in self.live():
            if "cluster_state:ok" not in self.cli(node, "cluster", "info"):
                return False
            info = self.cli(node, "info", "replication")
            if "role:slave" in info and "master_link_status:up" not in info:
                return False
            replicas += "role:slave" in info
        for node in self.live():
            shards = self.cli(node, "cluster", "shards").splitlines()
            pairs = list(itertools.pairwise(shards))  # "field", "value" lines
            online = [a for a, b in pairs if a == "health" and b == "online"]
            roles = [b for a, b in pairs if a == "role"]
            if len(online) != len(self.live()) or roles.count("replica") < replicas:
                return False
        return True

    def wait_ok(self, timeout: float = 60.0) -> None:
        """Block until ``is_ok`` (after a create or a failover)."""
        deadline = time.monotonic() + timeout
        while not self.is_ok():
            if time.monotonic() > deadline:
                raise TimeoutError(f"the Redis Cluster was not ok within {timeout} s")
            time.sleep(0.1)

    def stop(self) -> None:
        """Stop every node by its pid."""
        for node in self.nodes:
            node.stop()

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        for node in self.nodes:
            node.close()
