"""The private ``redis-server`` of a ``-j N`` crawl: its workers' one frontier.

It listens on a Unix socket only (``--port 0``, mode 0700, in a fresh temporary
directory: a short path, as a socket's is at most 107 bytes, and nothing stale to
meet), never on TCP. With a ``state_dir`` it keeps an append-only file there, so that
a crawl killed as a whole resumes; without one it keeps nothing. It is our child,
stopped by its pid; on Linux it also gets SIGTERM when the crawl's process dies
(``PR_SET_PDEATHSIG``), so a ``kill -9`` of the crawl leaves no server behind.
"""

from __future__ import annotations

import asyncio
import ctypes
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

from redis import asyncio as aioredis
from redis.exceptions import RedisError

from netdisco.exceptions import ConfigError, FrontierUnavailable

#: seconds the server has to answer PING after it started
READY_TIMEOUT = 20.0
#: PR_SET_PDEATHSIG, from <sys/prctl.h>
_PR_SET_PDEATHSIG = 1


def die_with_parent(signum: int) -> None:
    """Ask Linux to send ``signum`` to this process when its parent dies (elsewhere: no-op).

    Runs in the child between fork and exec (``preexec_fn``)."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signum)


class PrivateRedis:
    """``redis-server`` on a Unix socket in ``run_dir``, its data in ``state_dir`` (if any)."""

    def __init__(self, run_dir: Path, state_dir: Path | None) -> None:
        self.socket = run_dir / "redis.sock"
        self.state_dir = state_dir
        self.log = (state_dir or run_dir) / "redis-server.log"
        self.process: asyncio.subprocess.Process | None = None

    @property
    def url(self) -> str:
        """The frontier URL of the workers: each host owned by one worker at a time."""
        return f"unix://{self.socket}?politeness=owner"

    def command(self) -> list[str]:
        """The argv: no TCP, no snapshots, an append-only file with a ``state_dir``."""
        server = shutil.which("redis-server")
        if server is None:
            raise ConfigError(
                "processes",
                "needs redis-server for its workers' shared frontier: install Debian's "
                "redis-server package (apt-get install redis-server)",
            )
        data = self.state_dir or self.socket.parent
        return [
            server,
            "--port", "0",
            "--unixsocket", str(self.socket),
            "--unixsocketperm", "700",
            "--dir", str(data),
            "--save", "",
            "--appendonly", "yes" if self.state_dir else "no",
            "--appendfsync", "everysec",
            "--daemonize", "no",
        ]  # fmt: skip

    async def start(self) -> None:
        """Start it and wait until it answers (``FrontierUnavailable`` if it does not)."""
        argv = self.command()
        with self.log.open("ab") as log:
            self.process = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=log,
                stderr=asyncio.subprocess.STDOUT,
                start_new_session=True,  # Ctrl-C reaches the crawl, which stops it last
                preexec_fn=lambda: die_with_parent(signal.SIGTERM),
            )
        await self._wait_ready()

    async def _wait_ready(self) -> None:
        deadline = time.monotonic() + READY_TIMEOUT
        client = aioredis.Redis(unix_socket_path=str(self.socket), socket_timeout=2.0)
        try:
            while time.monotonic() < deadline:
                assert self.process is not None
                if self.process.returncode is not None:
                    break
                try:
                    if await client.ping():
                        return
                except RedisError:
                    await asyncio.sleep(0.02)
        finally:
            await client.aclose()
        raise FrontierUnavailable(f"the crawl's redis-server did not start: see {self.log}")

    async def stop(self) -> None:
        """SIGTERM (it writes its append-only file out), SIGKILL after 10 s."""
        process, self.process = self.process, None
        if process is None or process.returncode is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(process.wait(), 10.0)
        except TimeoutError:
            process.kill()
            await process.wait()


def run_directory() -> Path:
    """A fresh private directory (mode 0700) for the crawl's sockets."""
    return Path(tempfile.mkdtemp(prefix="netdisco-j-"))
