"""Benchmark of the monitor (not a test): run ``.venv/bin/python bench/monitor_bench.py``.

1. graceful leave -> ``engine_left`` event, p50/p99 over 200 runs after 50 warm-up runs
   (the leave transaction netdisco's registry sends: leaving write, tombstone, delete;
   timed from the send);
2. ``engine_lost`` event -> e-mail accepted by aiosmtpd (no grace, no batching), p50/p99;
3. 1,000 engines churning in 4 processes: final view == truth, and joins + leaves +
   2 x restarts + unobserved == the true number of creates and deletes;
4. the same with graceful leaves only: every ``engine_lost`` there is a misread leave.

Parts 1-2 share one ZooKeeper, 3 and 4 get their own. Prints one JSON object per part.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from aiosmtpd.controller import Controller

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from monitor.config import load_config  # noqa: E402
from monitor.daemon import Monitor  # noqa: E402
from monitor.events import Event, EventType  # noqa: E402
from monitor.settings import MonitorConfig  # noqa: E402
from netdisco.testing import ZooKeeperServer, free_port  # noqa: E402
from tests.monitor.fake_engines import FakeEngine  # noqa: E402

#: untimed runs first: a fresh ZooKeeper's JVM is still compiling (p99 7-17 ms cold)
WARMUP = 50


def _config(hosts: str, **overrides: Any) -> MonitorConfig:
    base = {"zookeeper.hosts": hosts, "zookeeper.session_timeout": 10.0, "http.port": 0,
            "alerts.grace": 0.0, "alerts.batch_window": 0.0, **overrides}  # fmt: skip
    return load_config(None, env={}, overrides=base)


def _percentiles(samples_ms: list[float]) -> dict[str, float]:
    ordered = sorted(samples_ms)
    pick = lambda q: ordered[min(len(ordered) - 1, int(q * len(ordered)))]  # noqa: E731
    return {"n": len(ordered), "p50_ms": round(statistics.median(ordered), 2),
            "p99_ms": round(pick(0.99), 2), "max_ms": round(ordered[-1], 2)}  # fmt: skip


class _Waiter:
    """Hands the loop-side arrival time of the next matching event to the benchmark."""

    def __init__(self, monitor: Monitor) -> None:
        self.want: tuple[EventType, str] | None = None
        self.future: asyncio.Future[float] | None = None
        monitor.listeners.append(self._on_event)

    def expect(self, kind: EventType, engine_id: str) -> asyncio.Future[float]:
        self.want, self.future = (kind, engine_id), asyncio.get_running_loop().create_future()
        return self.future

    def _on_event(self, event: Event) -> None:
        if self.future and not self.future.done() and (event.type, event.engine_id) == self.want:
            self.future.set_result(time.perf_counter())


def _timed_leave(engine: FakeEngine) -> float:
    sent = time.perf_counter()
    engine.leave()
    return sent


async def leave_latency(hosts: str, runs: int) -> dict[str, Any]:
    monitor = Monitor(_config(hosts))
    waiter = _Waiter(monitor)
    await monitor.start()
    await monitor.watcher.fresh.wait()
    engine = await asyncio.to_thread(FakeEngine, hosts, "/netdiscovery", "bench", 10.0)
    samples, kinds = [], Counter[str]()
    try:
        for run in range(WARMUP + runs):
            joined = waiter.expect(EventType.ENGINE_JOINED, "bench")
            await asyncio.to_thread(engine.join)
            await asyncio.wait_for(joined, 10)
            left = waiter.expect(EventType.ENGINE_LEFT, "bench")
            sent = await asyncio.to_thread(_timed_leave, engine)
            latency = (await asyncio.wait_for(left, 10) - sent) * 1000
            if run >= WARMUP:
                samples.append(latency)
        kinds.update(e.type.value for e in monitor.recent)
    finally:
        await asyncio.to_thread(engine.close)
        await monitor.close()
    return {"part": "graceful leave -> engine_left", **_percentiles(samples),
            "lost_instead": kinds["engine_lost"]}  # fmt: skip


class _Inbox:
    def __init__(self) -> None:
        self.accepted: asyncio.Queue[float] | None = None
        self.loop: asyncio.AbstractEventLoop | None = None

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        now = time.perf_counter()
        assert self.loop is not None
        assert self.accepted is not None
        self.loop.call_soon_threadsafe(self.accepted.put_nowait, now)
        return "250 OK"


async def email_latency(hosts: str, runs: int) -> dict[str, Any]:
    inbox = _Inbox()
    inbox.loop, inbox.accepted = asyncio.get_running_loop(), asyncio.Queue()
    smtp = Controller(inbox, hostname="127.0.0.1", port=free_port())
    smtp.start()
    email = {"email.port": smtp.port, "email.sender": "n@example.org",
             "email.to": ["ops@example.org"], "email.events": ["engine_lost"]}  # fmt: skip
    monitor = Monitor(_config(hosts, **email))
    waiter = _Waiter(monitor)
    await monitor.start()
    await monitor.watcher.fresh.wait()
    engine = await asyncio.to_thread(FakeEngine, hosts, "/netdiscovery", "mail", 10.0)
    samples = []
    try:
        for run in range(WARMUP + runs):
            joined = waiter.expect(EventType.ENGINE_JOINED, "mail")
            await asyncio.to_thread(engine.join)
            await asyncio.wait_for(joined, 10)
            lost = waiter.expect(EventType.ENGINE_LOST, "mail")
            await asyncio.to_thread(engine.vanish)
            event_at = await asyncio.wait_for(lost, 10)
            latency = (await asyncio.wait_for(inbox.accepted.get(), 10) - event_at) * 1000
            if run >= WARMUP:
                samples.append(latency)
    finally:
        await asyncio.to_thread(engine.close)
        await monitor.close()
        smtp.stop()
    return {"part": "engine_lost -> e-mail accepted", **_percentiles(samples)}


async def _churner(
    hosts: str, prefix: str, engines: int, ops: int, *extra: str
) -> asyncio.subprocess.Process:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tests.monitor.fake_engines", "churn", hosts, "/netdiscovery",
        prefix, "--engines", str(engines), "--ops", str(ops), *extra, cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert proc.stdout is not None
    assert (await proc.stdout.readline()).strip() == b"ready"
    return proc


async def churn(hosts: str, engines: int, procs: int, ops: int, *extra: str) -> dict[str, Any]:
    monitor = Monitor(_config(hosts))
    await monitor.start()
    await monitor.watcher.fresh.wait()
    workers = await asyncio.gather(
        *(_churner(hosts, f"w{i}-", engines // procs, ops, *extra) for i in range(procs))
    )
    try:
        started = time.perf_counter()
        for proc in workers:
            assert proc.stdin is not None
            proc.stdin.write(b"go\n")
        results = [json.loads(await p.stdout.readline()) for p in workers if p.stdout]
        churned = time.perf_counter() - started
        truth = {n: c for r in results for n, c in r["held"].items()}
        while {m.name: m.czxid for m in monitor.watcher.members()} != truth:
            assert time.perf_counter() - started < 120, "the view did not converge"
            await asyncio.sleep(0.01)
        converged = time.perf_counter() - started - churned
        seen = sum(monitor.counts[t] for t in ("engine_joined", "engine_left", "engine_lost"))
        seen += 2 * monitor.counts["engine_restarted"]
        true_changes = sum(r["creates"] + r["deletes"] for r in results)
        graceful = sum(r["leaves"] for r in results)
        errors = sum(r["errors"] for r in results)  # failed engine ops: truth uncertain
        events = dict(monitor.counts)  # before the churners close their sessions (all lost)
    finally:
        for proc in workers:
            assert proc.stdin is not None
            proc.stdin.write(b"bye\n")
        await asyncio.gather(*(p.wait() for p in workers))
        await monitor.close()
    name = f"{engines} engines churning {' '.join(extra)}".strip()
    return {"part": name, "true_changes": true_changes,
            "reported": seen, "unobserved": monitor.watcher.unobserved_total,
            "accounted": seen + monitor.watcher.unobserved_total == true_changes,
            "view_equals_truth": True, "graceful_leaves": graceful,
            "engine_op_errors": errors, "churn_s": round(churned, 2),
            "converged_after_s": round(converged, 3), "events": events}  # fmt: skip


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--engines", type=int, default=1000)
    parser.add_argument("--procs", type=int, default=4)
    parser.add_argument("--ops", type=int, default=10)
    parser.add_argument("--per-client", type=int, default=10, help="engines per kazoo session")
    args = parser.parse_args()
    with ZooKeeperServer() as zk:
        print(json.dumps(await leave_latency(zk.hosts, args.runs)), flush=True)
        print(json.dumps(await email_latency(zk.hosts, args.runs)), flush=True)
    with ZooKeeperServer() as zk:
        per_client = ("--per-client", str(args.per_client))
        result = await churn(zk.hosts, args.engines, args.procs, args.ops, *per_client)
        print(json.dumps(result), flush=True)
    with ZooKeeperServer() as zk:  # every delete after a leaving write: engine_lost must be 0
        result = await churn(
            zk.hosts, args.engines, args.procs, args.ops, *per_client, "--graceful-only"
        )
        print(json.dumps(result), flush=True)


if __name__ == "__main__":
    import logging

    import structlog

    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.ERROR))
    logging.getLogger("kazoo").setLevel(logging.CRITICAL)
    asyncio.run(main())
