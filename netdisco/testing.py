"""Helpers for testing code that uses netdisco: real servers on loopback.

``ZooKeeperServer`` starts Debian's ZooKeeper (``/usr/share/java/zookeeper.jar``)
as a child process, known by pid, on a free loopback port; it can be stopped
and restarted on the same data directory to test server restarts. ``RedisServer``
does the same for Debian's ``redis-server`` (optionally with AOF persistence), and
``RedisClusterServer`` runs six of them as a Redis Cluster (3 masters, 3 replicas).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import itertools
import random
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, Self

from aiohttp import web

ZK_JAR = Path("/usr/share/java/zookeeper.jar")
ZK_CONF_DIR = Path("/etc/zookeeper/conf")


@contextlib.asynccontextmanager
async def serve(app: web.Application, host: str = "127.0.0.1") -> AsyncIterator[str]:
    """Serve ``app`` on a free loopback port inside the running loop; yields its base URL."""
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
    await runner.setup()
    await web.TCPSite(runner, host, 0).start()
    try:
        yield f"http://{host}:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()


async def eventually(check: Callable[[], Any], what: str = "", *, timeout: float = 60.0) -> Any:
    """Poll ``check`` (sync or async) until it returns something truthy, and return that.

    The deadline is generous on purpose: it only decides how long a broken test takes
    to fail, never whether a working one passes.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not reached within {timeout} s: {what or check}")
        await asyncio.sleep(0.02)


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on right now."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def wait_port(host: str, port: int, timeout: float = 20.0) -> None:
    """Block until something accepts connections on ``host:port``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"nothing listens on {host}:{port} after {timeout} s")


def four_letter(host: str, port: int, word: str) -> str:
    """Send a ZooKeeper four-letter command (``ruok``, ``cons``, ...) and read the reply."""
    with socket.create_connection((host, port), timeout=2.0) as sock:
        sock.sendall(word.encode())
        chunks = []
        while data := sock.recv(65536):
            chunks.append(data)
    return b"".join(chunks).decode()


class ServerProcess:
    """A server run as a child process on a free loopback port, stopped by its pid.

    Subclasses say how to launch it (``command``) and when it is ready (``ready``);
    ``restart`` keeps the port and the data directory.
    """

    name = "server"

    def __init__(self, data_dir: Path | None, prefix: str) -> None:
        self.data_dir = data_dir or Path(tempfile.mkdtemp(prefix=prefix))
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.host = "127.0.0.1"
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None

    def command(self) -> list[str]:
        """The argv that starts the server in the foreground."""
        raise NotImplementedError

    def ready(self) -> bool:
        """Whether the server answers (not merely listens)."""
        raise NotImplementedError

    def start(self, timeout: float = 30.0) -> None:
        """Start (or restart, on the same port and data directory) and wait until ready."""
        with open(self.data_dir / "server.log", "ab") as log:
            self.process = subprocess.Popen(
                self.command(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.name} exited; see {self.data_dir / 'server.log'}")
            if self.ready():
                return
            time.sleep(0.05)
        raise TimeoutError(f"{self.name} was not ready within {timeout} s")

    def stop(self, sig: int = signal.SIGTERM) -> None:
        """Stop the server by its pid (SIGKILL after 10 s)."""
        proc, self.process = self.process, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(sig)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)

    def restart(self, downtime: float = 0.0) -> None:
        """Stop, stay down ``downtime`` seconds, start again on the same port and data."""
        self.stop()
        time.sleep(downtime)
        self.start()

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class ZooKeeperServer(ServerProcess):
    """A standalone ZooKeeper server on loopback, for tests and the demo.

    tickTime 500 ms lets tests negotiate session timeouts down to 1 s.
    """

    name = "ZooKeeper"

    def __init__(self, data_dir: Path | None = None, tick_ms: int = 500) -> None:
        super().__init__(data_dir, "netdisco-zk-")
        self.tick_ms = tick_ms

    @property
    def hosts(self) -> str:
        """The connection string for clients."""
        return f"{self.host}:{self.port}"

    def command(self) -> list[str]:
        if not ZK_JAR.exists():
            raise RuntimeError(f"{ZK_JAR} is missing: install Debian's zookeeper package")
        cfg = self.data_dir / "zoo.cfg"
        cfg.write_text(
            f"tickTime={self.tick_ms}\n"
            f"dataDir={self.data_dir / 'data'}\n"
            f"clientPort={self.port}\n"
            f"clientPortAddress={self.host}\n"
            "admin.enableServer=false\n"
            "4lw.commands.whitelist=*\n"
            "maxClientCnxns=0\n"
            "minSessionTimeout=1000\n"
        )
        main = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
        return ["java", "-Xmx256m", "-cp", f"{ZK_CONF_DIR}:{ZK_JAR}", main, str(cfg)]

    def ready(self) -> bool:
        try:  # "ruok" answers before the server serves; "srvr" tells the truth
            return four_letter(self.host, self.port, "srvr").startswith("Zookeeper version")
        except OSError:
            return False


def redis_ping(host: str, port: int) -> bool:
    """True when Redis answers PING with PONG (not while it is still loading its data)."""
    try:
        with socket.create_connection((host, port), timeout=1.0) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(64).startswith(b"+PONG")
    except OSError:
        return False


class RedisServer(ServerProcess):
    """Debian's ``redis-server`` on a free loopback port, known by pid.

    ``appendonly`` turns on AOF persistence (fsync ``appendfsync``) so that
    ``restart()`` on the same directory keeps the data, as a production server would.
    """

    name = "redis-server"

    def __init__(
        self,
        data_dir: Path | None = None,
        *,
        appendonly: bool = False,
        appendfsync: str = "everysec",
        cluster_timeout_ms: int = 0,
    ) -> None:
        super().__init__(data_dir, "netdisco-redis-")
        self.appendonly = appendonly
        self.appendfsync = appendfsync
        self.cluster_timeout_ms = cluster_timeout_ms  # > 0: a Redis Cluster node
        self.bus_port = free_port() if cluster_timeout_ms else 0  # the nodes' own port

    @property
    def url(self) -> str:
        """The connection URL for clients (database 0)."""
        return f"redis://{self.host}:{self.port}/0"

    def command(self) -> list[str]:
        if shutil.which("redis-server") is None:
            raise RuntimeError("redis-server is missing: install Debian's redis-server package")
        return [
            "redis-server",
            "--bind", self.host,
            "--port", str(self.port),
            "--dir", str(self.data_dir),
            "--save", "",
            "--appendonly", "yes" if self.appendonly else "no",
            "--appendfsync", self.appendfsync,
            "--daemonize", "no",
            *self._cluster_args(),
        ]  # fmt: skip

    def _cluster_args(self) -> list[str]:
        if not self.cluster_timeout_ms:
            return []
        return [
            "--cluster-enabled", "yes",
            "--cluster-config-file", str(self.data_dir / "nodes.conf"),
            "--cluster-node-timeout", str(self.cluster_timeout_ms),
            "--cluster-port", str(self.bus_port),
            "--repl-ping-replica-period", "1",  # replicas soon have an offset, so are served
        ]  # fmt: skip

    def ready(self) -> bool:
        return redis_ping(self.host, self.port)


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
        self.stop()


def write_site(root: Path, pages: int, *, seed: int = 1, links: int = 6) -> Path:
    """A deterministic site of ``pages`` HTML pages under ``root``, all reachable from
    ``/index.html``: page j > 0 is linked from a random earlier page, and every page has
    ``links`` more random in-site links (some with a fragment), an off-site link and a
    ``mailto:`` that crawlers must drop.
    """
    rng = random.Random(seed)
    paths = ["/index.html", *(f"/p/{n // 100:03d}/page-{n:05d}.html" for n in range(1, pages))]
    outgoing: list[list[int]] = [[] for _ in range(pages)]
    for child in range(1, pages):
        outgoing[rng.randrange(child)].append(child)
    for number, path in enumerate(paths):
        targets = outgoing[number] + [rng.randrange(pages) for _ in range(links)]
        anchors = "".join(
            f'<a href="{paths[t]}{"#top" if t % 3 == 0 else ""}">{t}</a>\n' for t in targets
        )
        body = (
            f"<html><head><title>page {number}</title></head><body>"
            f'<div class="product"><h1 class="product-title">Item {number}</h1></div>\n'
            f'{anchors}<a href="http://offsite.invalid/x">away</a> '
            '<a href="mailto:someone@example.org">mail</a></body></html>\n'
        )
        target = root / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(body, encoding="utf-8")
    return root
