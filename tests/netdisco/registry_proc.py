"""Run one Registration until SIGTERM/SIGINT, for kill/stop/continue tests.

Usage: python registry_proc.py HOSTS ENGINE_ID SESSION_TIMEOUT
(the real ``netdisco engine`` CLI is tested elsewhere; this isolates the registry).
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import uuid

from netdisco.cluster.contract import payload_from_dict
from netdisco.cluster.registry import Registration, ZooKeeperSettings


async def main(hosts: str, engine_id: str, session_timeout: float) -> None:
    settings = ZooKeeperSettings(hosts=hosts, session_timeout=session_timeout, audit_interval=1.0)
    data = {
        "id": engine_id,
        "incarnation": uuid.uuid4().hex,
        "host": "127.0.0.1",
        "port": 0,
        "status_url": "http://127.0.0.1:0/netdiscovery/engine",
        "pid": os.getpid(),
        "version": "test",
        "started_at": 1767225600.0,
        "spiders": [],
    }
    registration = Registration(settings, engine_id, lambda: payload_from_dict(data))
    done = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, done.set)
    await registration.start()
    await done.wait()
    await registration.stop()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], float(sys.argv[3])))
