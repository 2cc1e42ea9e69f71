"""Benchmark the self-healing registration against a private ZooKeeper on loopback.

1. Forced session expiry (a second client takes over the session, then closes
   it) -> our node back, seen by a separate watching client. Target p99 <= 0.5 s.
2. Graceful ``stop()`` -> node gone, seen by that watching client's exists-watch.
   Target <= 20 ms.

Run: ``.venv/bin/python bench/registry_bench.py [--runs 50]``.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import uuid
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from kazoo.client import KazooClient
from kazoo.protocol.states import EventType, WatchedEvent, ZnodeStat

from netdisco.cluster.registry import Registration, ZooKeeperSettings
from netdisco.cluster.zk import wait_result
from netdisco.testing import ZooKeeperServer

SESSION_TIMEOUT = 2.0
PATH = "/netdiscovery/bench-engine"


def describe() -> dict[str, Any]:
    return {"id": "bench-engine", "incarnation": uuid.uuid4().hex, "spiders": []}


def settle(fired: asyncio.Future[tuple[float, str]], value: tuple[float, str]) -> None:
    if not fired.done():
        fired.set_result(value)


async def until(observer: KazooClient, want: Callable[[ZnodeStat | None], bool]) -> float:
    """perf_counter() when our node's stat satisfies ``want``.

    The time is stamped on kazoo's thread when the watch event that made it true
    fires; when the state was reached unseen (between two looks), the time of the
    look is taken instead, which can only overstate the latency.
    """
    loop = asyncio.get_running_loop()
    while True:
        fired: asyncio.Future[tuple[float, str]] = loop.create_future()

        def watch(event: WatchedEvent, fired: asyncio.Future[tuple[float, str]] = fired) -> None:
            stamp = time.perf_counter()
            loop.call_soon_threadsafe(settle, fired, (stamp, event.type))

        stat = await wait_result(observer.exists_async(PATH, watch=watch))
        if want(stat):
            return time.perf_counter()
        stamp, kind = await fired
        stat = await wait_result(observer.exists_async(PATH))
        if want(stat) and kind in (EventType.CREATED, EventType.DELETED):
            return stamp


def recreated(old_czxid: int, stat: ZnodeStat | None) -> bool:
    return stat is not None and stat.czxid != old_czxid


def absent(stat: ZnodeStat | None) -> bool:
    return stat is None


async def registered(registration: Registration) -> None:
    while not registration.healthy:  # noqa: ASYNC110 - Registration exposes no event
        await asyncio.sleep(0.005)


def thief_start(hosts: str, client_id: tuple[int, bytes]) -> KazooClient:
    thief = KazooClient(hosts=hosts, client_id=client_id, timeout=SESSION_TIMEOUT)
    thief.start(timeout=10)
    return thief


def thief_close(thief: KazooClient) -> None:
    thief.stop()
    thief.close()


async def forced_expiry(hosts: str, observer: KazooClient, runs: int) -> list[float]:
    """Seconds from the session's close to our node existing again."""
    clients: list[KazooClient] = []

    def factory(**kwargs: Any) -> KazooClient:
        clients.append(KazooClient(**kwargs))
        return clients[-1]

    settings = ZooKeeperSettings(hosts=hosts, session_timeout=SESSION_TIMEOUT)
    registration = Registration(settings, "bench-engine", describe, client_factory=factory)
    await registration.start()
    samples = []
    try:
        for _ in range(runs):
            await registered(registration)
            old_czxid = (await wait_result(observer.exists_async(PATH))).czxid
            thief = await asyncio.to_thread(thief_start, hosts, clients[0].client_id)
            start = time.perf_counter()
            await asyncio.to_thread(thief_close, thief)
            back = await until(observer, partial(recreated, old_czxid))
            samples.append(back - start)
    finally:
        await registration.stop()
    return samples


async def graceful_stop(hosts: str, observer: KazooClient, runs: int) -> list[float]:
    """Seconds from calling ``stop()`` to the watching client seeing the node deleted."""
    settings = ZooKeeperSettings(hosts=hosts, session_timeout=SESSION_TIMEOUT)
    samples = []
    for _ in range(runs):
        registration = Registration(settings, "bench-engine", describe)
        await registration.start()
        await registered(registration)
        gone = asyncio.create_task(until(observer, absent))
        await asyncio.sleep(0.01)  # the watch is armed
        start = time.perf_counter()
        await registration.stop()
        samples.append(await gone - start)
    return samples


def summary(name: str, samples: list[float]) -> str:
    ordered = sorted(samples)

    def pct(q: float) -> float:
        return ordered[round(q * (len(ordered) - 1))] * 1000

    return (
        f"{name:<28} n={len(samples):<3} p50={statistics.median(samples) * 1000:6.1f} ms  "
        f"p90={pct(0.9):6.1f} ms  p99={pct(0.99):6.1f} ms  max={ordered[-1] * 1000:6.1f} ms"
    )


class NoSyncServer(ZooKeeperServer):
    """The same server without fsync per transaction: isolates our latency from the disk."""

    def _write_config(self) -> Path:
        cfg = super()._write_config()
        cfg.write_text(cfg.read_text() + "forceSync=no\n")
        return cfg


async def main(runs: int, no_fsync: bool) -> None:
    with NoSyncServer() if no_fsync else ZooKeeperServer() as server:
        observer = KazooClient(hosts=server.hosts)
        await asyncio.to_thread(observer.start, 15)
        try:
            expiry = await forced_expiry(server.hosts, observer, runs)
            stop = await graceful_stop(server.hosts, observer, runs)
        finally:
            await asyncio.to_thread(lambda: (observer.stop(), observer.close()))
    fsync = "off (forceSync=no)" if no_fsync else "on (default)"
    print(f"session timeout {SESSION_TIMEOUT} s, tickTime 500 ms, loopback, fsync {fsync}")
    print(summary("forced expiry -> node back", expiry))
    print(summary("graceful stop -> node gone", stop))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--no-fsync", action="store_true", help="server without forceSync")
    args = parser.parse_args()
    asyncio.run(main(args.runs, args.no_fsync))
