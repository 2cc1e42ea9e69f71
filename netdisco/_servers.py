"""Real servers on loopback as child processes, known by pid (internal).

``ZooKeeperServer`` starts Debian's ZooKeeper (``/usr/share/java/zookeeper.jar``)
on a free loopback port; it can be stopped and restarted on the same data
directory. ``RedisServer`` does the same for Debian's ``redis-server``
(optionally with AOF persistence, or as a Redis Cluster node).

``netdisco demo`` runs its ZooKeeper from here; tests reach the same classes
through ``netdisco.testing``, which re-exports them. Nothing here imports netdisco.
"""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Self

ZK_JAR = Path("/usr/share/java/zookeeper.jar")
ZK_CONF_DIR = Path("/etc/zookeeper/conf")


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


def _port_taken(data_dir: Path) -> bool:
    """Whether the server's log says its port was taken (the words of Redis and Java)."""
    try:
        text = (data_dir / "server.log").read_text(errors="replace")[-4000:]
    except OSError:
        return False
    return "Address already in use" in text


def four_letter(host: str, port: int, word: str) -> str:
    """Send a ZooKeeper four-letter command (``ruok``, ``cons``, ...) and read the reply."""
    with socket.create_connection((host, port), timeout=2.0) as sock:
        sock.sendall(word.encode())
        chunks = []
        while data := sock.recv(65536):
            chunks.append(data)
    return b"".join(chunks).decode()


def zookeeper_mode(host: str, port: int) -> str | None:
    """``leader``, ``follower`` or ``standalone`` while the server serves, else None."""
    try:
        answer = four_letter(host, port, "srvr")
    except OSError:
        return None
    for line in answer.splitlines():
        if line.startswith("Mode: "):
            return line.split(": ", 1)[1].strip()
    return None


class ServerProcess:
    """A server run as a child process on a free loopback port, stopped by its pid.

    Subclasses say how to launch it (``command``) and when it is ready (``ready``);
    ``restart`` keeps the port and the data directory.
    """

    name = "server"

    def __init__(self, data_dir: Path | None, prefix: str) -> None:
        self._owns_dir = data_dir is None  # a temporary directory, removed by close()
        self.data_dir = data_dir or Path(tempfile.mkdtemp(prefix=prefix))
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.host = "127.0.0.1"
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None
        self._started = False  # once ready, its port is its own: restarts keep it

    def command(self) -> list[str]:
        """The argv that starts the server in the foreground."""
        raise NotImplementedError

    def ready(self) -> bool:
        """Whether the server answers (not merely listens)."""
        raise NotImplementedError

    def start(self, timeout: float = 30.0) -> None:
        """Start (or restart, on the same port and data directory) and wait until ready.

        A first start whose port another process took between ``free_port`` and the
        server's bind is tried again on new ports; a restart keeps its port.
        """
        for attempt in range(1 if self._started else 3):
            try:
                return self._start(timeout)
            except RuntimeError:
                if attempt == 2 or self._started or not _port_taken(self.data_dir):
                    raise
                self.port = free_port()
                self._repick_ports()

    def _repick_ports(self) -> None:
        """New ports besides ``port`` (a cluster node's bus port)."""

    def _start(self, timeout: float) -> None:
        with open(self.data_dir / "server.log", "ab") as log:
            self.process = subprocess.Popen(
                self.command(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.name} exited; see {self.data_dir / 'server.log'}")
            if self.ready():
                self._started = True
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

    def close(self) -> None:
        """Stop for good: the temporary data directory this object made goes too."""
        self.stop()
        if self._owns_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class ZooKeeperServer(ServerProcess):
    """A standalone ZooKeeper server on loopback, for tests and the demo.

    tickTime 500 ms lets tests negotiate session timeouts down to 1 s; the longest a
    client may ask for is 20 ticks unless ``max_session_ms`` says more.
    """

    name = "ZooKeeper"

    def __init__(
        self, data_dir: Path | None = None, tick_ms: int = 500, max_session_ms: int = 0
    ) -> None:
        super().__init__(data_dir, "netdisco-zk-")
        self.tick_ms = tick_ms
        self.max_session_ms = max_session_ms or 20 * tick_ms  # ZooKeeper's own default

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
            f"maxSessionTimeout={self.max_session_ms}\n"
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

    def _repick_ports(self) -> None:
        if self.bus_port:
            self.bus_port = free_port()

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
