"""A 3-server ZooKeeper ensemble on loopback (Debian's package), each server known by pid."""

from __future__ import annotations

import signal
import subprocess
import tempfile
import time
from pathlib import Path

from netdisco.testing import ZK_CONF_DIR, ZK_JAR, free_port, zookeeper_mode


class Ensemble:
    """Three servers, three client ports, three data directories; tickTime 500 ms."""

    def __init__(self, size: int = 3, data_dir: Path | None = None) -> None:
        self.data_dir = data_dir or Path(tempfile.mkdtemp(prefix="netdisco-ensemble-"))
        self.ids = list(range(1, size + 1))
        self.ports = {i: (free_port(), free_port(), free_port()) for i in self.ids}
        self.procs: dict[int, subprocess.Popen[bytes]] = {}

    @property
    def hosts(self) -> str:
        return ",".join(f"127.0.0.1:{self.ports[i][0]}" for i in self.ids)

    def start(self, server: int | None = None, timeout: float = 60.0) -> None:
        """Start one server (or all) and wait until it (they) serve."""
        for i in [server] if server else self.ids:
            self.procs[i] = self._launch(i)
        deadline = time.monotonic() + timeout
        while not all(self.mode(i) for i in ([server] if server else self.ids)):
            if time.monotonic() > deadline:
                raise TimeoutError(f"ensemble not serving; see {self.data_dir}")
            time.sleep(0.1)

    def _launch(self, i: int) -> subprocess.Popen[bytes]:
        home = self.data_dir / f"s{i}"
        (home / "data").mkdir(parents=True, exist_ok=True)
        (home / "data" / "myid").write_text(f"{i}\n")
        peers = "".join(
            f"server.{j}=127.0.0.1:{self.ports[j][1]}:{self.ports[j][2]}\n" for j in self.ids
        )
        cfg = home / "zoo.cfg"
        cfg.write_text(
            f"tickTime=500\ninitLimit=10\nsyncLimit=5\ndataDir={home / 'data'}\n"
            f"clientPort={self.ports[i][0]}\nclientPortAddress=127.0.0.1\n"
            "admin.enableServer=false\n4lw.commands.whitelist=*\nmaxClientCnxns=0\n"
            "minSessionTimeout=1000\n" + peers
        )
        main = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
        with open(home / "server.log", "ab") as log:
            return subprocess.Popen(
                ["java", "-Xmx256m", "-cp", f"{ZK_CONF_DIR}:{ZK_JAR}", main, str(cfg)],
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip

    def mode(self, i: int) -> str | None:
        """``leader`` or ``follower`` while server ``i`` serves, else None."""
        return zookeeper_mode("127.0.0.1", self.ports[i][0])

    def leader(self) -> int | None:
        return next((i for i in self.ids if self.mode(i) == "leader"), None)

    def kill(self, i: int) -> None:
        proc = self.procs.pop(i, None)
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            proc.wait(10)

    def stop(self) -> None:
        for i in list(self.procs):
            self.kill(i)
