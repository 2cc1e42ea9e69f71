"""The monitor's memory against hostile ZooKeeper data and status answers (not a test).

    .venv/bin/python bench/monitor_memory.py znodes [--children 200] [--size 1000000]
    .venv/bin/python bench/monitor_memory.py status [--mb 300]

``znodes``: another process (an anonymous kazoo client) creates ``--children``
nodes of ``--size`` bytes of valid JSON under the root; the monitor, in this
process, sees them, serves ``/netdiscovery/monitor``, and sees them deleted.
``status``: one node whose ``status_url`` serves a ``--mb`` MB spider list,
polled for 10 s. Prints one JSON object with this process's RSS (``VmRSS``) and
peak (``VmHWM``) in MB at each step.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from monitor.config import load_config  # noqa: E402
from monitor.daemon import Monitor  # noqa: E402
from netdisco.testing import ZooKeeperServer, free_port  # noqa: E402

#: creates (or deletes) the nodes from another process: argv hosts, n, size, mode
_WRITER = """
import json, sys
from kazoo.client import KazooClient
hosts, n, size, mode = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
c = KazooClient(hosts=hosts); c.start(15); c.ensure_path("/netdiscovery")
for i in range(n):
    path = f"/netdiscovery/big-{i}"
    if mode == "delete":
        c.delete(path); continue
    head = json.dumps({"id": f"big-{i}", "state": "running", "contract": 2})[:-1]
    pad = size - len(head) - len(', "pad": []}')
    c.create(path, (head + ', "pad": [' + ",".join(["1"] * (pad // 2)) + "]}").encode())
c.stop(); c.close()
"""


class BigZooKeeper(ZooKeeperServer):
    """A ZooKeeper whose heap holds 200 MB of node data."""

    def command(self) -> list[str]:
        return [("-Xmx2g" if a == "-Xmx256m" else a) for a in super().command()]


def memory() -> dict[str, float]:
    fields = dict(
        line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines()
    )
    return {k: round(int(fields[k].split()[0]) / 1024, 1) for k in ("VmRSS", "VmHWM")}


async def _wait(predicate: Any, timeout: float = 300.0) -> float:
    start = time.monotonic()
    while not predicate():
        if time.monotonic() - start > timeout:
            raise TimeoutError("gave up waiting")
        await asyncio.sleep(0.05)
    return round(time.monotonic() - start, 2)


def _writer(hosts: str, n: int, size: int, mode: str) -> None:
    subprocess.run([sys.executable, "-c", _WRITER, hosts, str(n), str(size), mode], check=True)


async def _view(monitor: Monitor) -> dict[str, Any]:
    start = time.monotonic()
    url = f"{monitor.http.url}/netdiscovery/monitor"
    async with aiohttp.ClientSession() as session, session.get(url) as resp:
        body = await resp.read()
    return {"bytes": len(body), "seconds": round(time.monotonic() - start, 2)}


async def znodes(hosts: str, children: int, size: int) -> dict[str, Any]:
    monitor = Monitor(_config(hosts, 0.0))
    await monitor.start()
    await monitor.watcher.fresh.wait()
    out: dict[str, Any] = {"start": memory()}
    await asyncio.to_thread(_writer, hosts, children, size, "create")
    out["seen_after_s"] = await _wait(lambda: len(monitor.watcher.members()) == children)
    out["seen"] = memory()
    out["monitor_route"] = await _view(monitor)
    out["after_route"] = memory()
    await asyncio.to_thread(_writer, hosts, children, size, "delete")
    await _wait(lambda: not monitor.watcher.members())
    await asyncio.sleep(2)
    out["after_delete"] = memory()
    out["dropped"] = dict(getattr(monitor, "drops", {}))
    await monitor.close()
    return out


async def status(hosts: str, mb: int) -> dict[str, Any]:
    port = free_port()
    server = await asyncio.create_subprocess_exec(sys.executable, "-c", _SERVER, str(port), str(mb))
    try:
        await asyncio.sleep(1.5)
        monitor = Monitor(_config(hosts, 1.0))
        await monitor.start()
        await monitor.watcher.fresh.wait()
        out: dict[str, Any] = {"start": memory()}
        url = f"http://127.0.0.1:{port}/netdiscovery/engine"
        node = {"id": "chatty", "state": "running", "contract": 2, "host": "127.0.0.1",
                "port": port, "status_url": url}  # fmt: skip
        await asyncio.to_thread(_create, hosts, node)
        await asyncio.sleep(10)
        out["after_10s_of_polls"] = memory()
        rate = monitor.status.rates.get("chatty")
        out["rate_error"] = rate.error if rate else None
        out["dropped"] = dict(getattr(monitor, "drops", {}))
        await monitor.close()
        return out
    finally:
        server.kill()
        await server.wait()


#: serves a ``mb`` MB spider list (chunked) on 127.0.0.1:port
_SERVER = """
import sys
from aiohttp import web
port, mb = int(sys.argv[1]), int(sys.argv[2])
item = b'{"name": "x", "pages_per_second": 1},'
chunk = item * (65536 // len(item))
async def spiders(request):
    resp = web.StreamResponse(); await resp.prepare(request); await resp.write(b"[")
    for _ in range(mb * 1_000_000 // len(chunk)):
        await resp.write(chunk)
    await resp.write(b'{"name": "y"}]'); return resp
app = web.Application(); app.router.add_get("/netdiscovery/spiders", spiders)
web.run_app(app, host="127.0.0.1", port=port, print=None)
"""


def _create(hosts: str, node: dict[str, Any]) -> None:
    from kazoo.client import KazooClient

    client = KazooClient(hosts=hosts)
    client.start(15)
    client.create("/netdiscovery/chatty", json.dumps(node).encode(), makepath=True)
    client.stop()
    client.close()


def _config(hosts: str, poll: float) -> Any:
    overrides = {"zookeeper.hosts": hosts, "zookeeper.session_timeout": 10.0, "http.port": 0,
                 "http.poll_status": poll, "alerts.grace": 0.0}  # fmt: skip
    return load_config(None, env={}, overrides=overrides)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("mode", choices=("znodes", "status"))
    parser.add_argument("--children", type=int, default=200)
    parser.add_argument("--size", type=int, default=1_000_000)
    parser.add_argument("--mb", type=int, default=300)
    args = parser.parse_args()
    with BigZooKeeper() as zk:
        if args.mode == "znodes":
            result = asyncio.run(znodes(zk.hosts, args.children, args.size))
        else:
            result = asyncio.run(status(zk.hosts, args.mb))
    print(json.dumps({"mode": args.mode, **vars(args), **result}))


if __name__ == "__main__":
    main()
