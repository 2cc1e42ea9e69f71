"""Many hosts of very different sizes behind nginx: how close does a crawl come to what
politeness allows, standalone and with three engines on Redis?

Usage: .venv/bin/python bench/many_hosts.py [--latency 0.02] [--delays 0,0.05]
       [--engines 1,3] [--per-host 2] [--concurrency 64] [--rounds 3] [--out FILE]
       [--politeness owner|engine] [--redis-for-one]

Each site is a real documentation tree from a Debian package (``SITES``; install them
with ``apt-get install cmake-doc postgresql-doc-15 python-django-doc python3.11-doc
valgrind libxslt1-dev nginx-light libnginx-mod-http-echo``), served by one nginx on a
loopback address of its own (127.0.1.1, .2, ...), every answer held back ``--latency``
seconds by the echo module's ``echo_sleep``. The crawl follows every link within the
six hosts (robots.txt not asked: nginx has none). For each delay and engine count it
runs ``--rounds`` crawls, the order rotated every round, and reads nginx's access log:

* pages and duplicates per host, counted at the server;
* the **politeness bound**: the largest host's pages x max(latency / slots, delay), the
  time a crawl needs if that host's slots are never free while it has work;
* **wall** (the first request to the last answer) and **CPU** (the engines, and Redis);
* the **idle share** the standalone crawl reports (``Crawler.stats.idle_share``);
* each host's requests started per 5 s (its timeline) and its slots' busy share, and
  each engine's CPU seconds per 5 s (5.0 is a whole core).

Prints one JSON line per crawl and a median-and-range summary per configuration.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from redis_bench import cpu_seconds, run_engines

#: (name, document root) of each site, largest first
SITES = [
    ("cmake", "/usr/share/doc/cmake-data/html"),
    ("postgres", "/usr/share/doc/postgresql-doc-15/html"),
    ("django", "/usr/share/doc/python-django-doc/html"),
    ("python", "/usr/share/doc/python3.11/html"),
    ("libxslt", "/usr/share/doc/libxslt1-dev/html"),
    ("valgrind", "/usr/share/doc/valgrind/html"),
]
ECHO_MODULE = "/usr/lib/nginx/modules/ngx_http_echo_module.so"
BUCKET = 5.0  # seconds a timeline column covers
SLACK = 0.002  # what nginx's millisecond timestamps cannot tell apart (s)


def addresses(count: int, first: int = 1) -> list[str]:
    """``count`` loopback addresses from 127.0.1.1: 250 in each /24 (127.0.1.x, 127.0.2.x,
    ...), none ending in .0 or .255."""
    return [f"127.0.{1 + n // 250}.{1 + n % 250}" for n in range(first - 1, first - 1 + count)]


def nginx_conf(work: Path, sites: list[tuple[str, str]], port: int, latency: float) -> Path:
    """One server for each (address, document root) on address:port, each answer after
    ``latency`` seconds."""
    servers = "\n".join(
        f"""
    server {{
        listen {address}:{port};
        root {root};
        location / {{ echo_sleep {latency}; echo_exec @file; }}
        location @file {{ try_files $uri $uri/index.html =404; }}
    }}"""
        for address, root in sites
    )
    conf = work / "nginx.conf"
    conf.write_text(
        f"""
load_module {ECHO_MODULE};
worker_processes 1;
worker_rlimit_nofile 65536;
daemon off;
pid {work}/nginx.pid;
error_log {work}/error.log warn;
events {{ worker_connections 4096; }}
http {{
    include /etc/nginx/mime.types;
    log_format bench '$msec $request_time $server_addr $status $request_uri';
    access_log {work}/access.log bench buffer=256k flush=1s;
    keepalive_requests 100000;
    sendfile on;
    {servers}
}}
"""
    )
    return conf


def read_log(path: Path) -> list[tuple[float, float, str, str]]:
    """(start, end, host address, uri) of each request nginx answered."""
    rows = []
    for line in path.read_text().splitlines():
        end, took, address, _status, uri = line.split(" ", 4)
        rows.append((float(end) - float(took), float(end), address, uri))
    return rows


def analyse(
    rows: list[tuple[float, float, str, str]],
    latency: float,
    delay: float,
    slots: int,
    names: dict[str, str],
) -> dict[str, Any]:
    """Per host (``names``: address -> name): pages, duplicates, span, busy share of its
    slots, closest starts, and the timeline; for the crawl: wall and the politeness
    bound."""
    by_host: dict[str, list[tuple[float, float, str]]] = defaultdict(list)
    for start, end, address, uri in rows:
        by_host[names.get(address, address)].append((start, end, uri))
    first = min(start for start, _, _, _ in rows)
    last = max(end for _, end, _, _ in rows)
    hosts: dict[str, Any] = {}
    for name, requests in sorted(by_host.items(), key=lambda kv: -len(kv[1])):
        requests.sort()
        starts = [start for start, _, _ in requests]
        gaps = [b - a for a, b in itertools.pairwise(starts)]
        span = max(end for _, end, _ in requests) - starts[0]
        timeline = Counter(int((start - first) // BUCKET) for start in starts)
        hosts[name] = {
            "pages": len(requests),
            "duplicates": len(requests) - len({uri for _, _, uri in requests}),
            "first_start": round(starts[0] - first, 2),
            "done_at": round(span + starts[0] - first, 2),
            "busy_share": round(sum(e - s for s, e, _ in requests) / (slots * span), 3),
            # nginx logs in whole milliseconds: a start is known to +-1 ms, a gap to +-2 ms
            "starts_closer_than_delay": sum(gap < delay - SLACK for gap in gaps) if delay else 0,
            "closest_starts": round(min(gaps), 4) if gaps else None,
            "timeline": [timeline.get(b, 0) for b in range(int((last - first) // BUCKET) + 1)],
        }
    largest = max(h["pages"] for h in hosts.values())
    bound = largest * max(latency / slots, delay)
    return {"wall": round(last - first, 2), "bound": round(bound, 2), "hosts": hosts}


def redis_calls(url: str) -> int:
    """Commands Redis has run so far (``INFO commandstats``): a pipeline of scripts
    counts each script, one round trip counts as many commands as it carries."""
    import redis

    client = redis.Redis.from_url(url)
    try:
        stats = client.info("commandstats")
    finally:
        client.close()
    return sum(int(v["calls"]) for v in stats.values())


def crawl_once(
    args: argparse.Namespace,
    work: Path,
    names: dict[str, str],
    engines: int,
    delay: float,
    redis_url: str,
    pids: list[int],
) -> dict[str, Any]:
    """One crawl of the hosts ``names`` (address -> name) by ``engines`` engines."""
    log = work / "access.log"
    log.write_text("")
    os.kill(int((work / "nginx.pid").read_text()), signal.SIGUSR1)  # reopen the log
    time.sleep(0.3)
    bases = ",".join(f"http://{address}:{args.port}" for address in names)
    frontier = "memory" if engines == 1 and not args.redis_for_one else redis_url
    if frontier != "memory":
        frontier = f"{redis_url}?prefix=many{uuid.uuid4().hex[:8]}&politeness={args.politeness}"
    before, calls = cpu_seconds(pids), redis_calls(redis_url)
    crawl = [bases, str(args.concurrency), str(delay), str(args.per_host)]
    results = run_engines(engines, frontier, crawl)
    redis_cpu = cpu_seconds(pids) - before
    calls = redis_calls(redis_url) - calls
    time.sleep(1.5)  # nginx flushes its log buffer every second
    row = analyse(read_log(log), args.latency, delay, args.per_host, names)
    row.update(
        engines=engines,
        delay=delay,
        frontier="memory" if frontier == "memory" else "redis",
        pages=sum(r["pages"] for r in results),
        served=sum(h["pages"] for h in row["hosts"].values()),
        duplicates=sum(h["duplicates"] for h in row["hosts"].values()),
        cpu=round(sum(r["cpu"] for r in results) + redis_cpu, 2),
        redis_cpu=round(redis_cpu, 2),
        idle_share=[r.get("idle_share") for r in results],
        takes=sum(r.get("takes", 0) for r in results),
        sent_back=sum(r.get("sent_back", 0) for r in results),
    )
    row["ratio_to_bound"] = round(row["wall"] / row["bound"], 2)
    if frontier != "memory":  # counted by the crawl, and by Redis (its commands)
        trips = sum(r.get("round_trips", 0) for r in results)
        row["round_trips_per_page"] = round(trips / max(row["served"], 1), 3)
        row["redis_commands_per_page"] = round(calls / max(row["served"], 1), 2)
        by: dict[str, int] = {}
        for r in results:
            for what, n in r.get("round_trips_by", {}).items():
                by[what] = by.get(what, 0) + n
        row["round_trips_by"] = dict(sorted(by.items(), key=lambda kv: -kv[1]))
    row["engine_cpu_per_5s"] = [_per_bucket(r["cpu_each_second"]) for r in results]
    row["sent_back_per_5s"] = [_per_bucket(r["sent_back_each_second"]) for r in results]
    if args.keep_logs is not None:
        args.keep_logs.mkdir(parents=True, exist_ok=True)
        name = f"e{engines}-d{delay}-{time.strftime('%H%M%S')}.log"
        shutil.copy(log, args.keep_logs / name)
    return row


def _per_bucket(each_second: list[float]) -> list[float]:
    """Sums of a per-second series over each ``BUCKET`` s (an engine's CPU seconds: its
    share of one core, x 5; or the requests it gave back)."""
    size = int(BUCKET)
    return [round(sum(each_second[i : i + size]), 1) for i in range(0, len(each_second), size)]


def summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Median and range of the figures the docs quote."""

    def spread(key: str) -> str:
        values = sorted(float(r[key]) for r in runs)
        return f"{statistics.median(values):g} [{values[0]:g}-{values[-1]:g}]"

    idle = [x for r in runs for x in r["idle_share"] if x is not None]
    return {
        "engines": runs[0]["engines"],
        "delay": runs[0]["delay"],
        "rounds": len(runs),
        "bound": runs[0]["bound"],
        "wall": spread("wall"),
        "cpu": spread("cpu"),
        "ratio_to_bound": spread("ratio_to_bound"),
        "idle_share": f"{statistics.median(idle):.3f} [{min(idle):.3f}-{max(idle):.3f}]"
        if idle
        else None,
        "served": [r["served"] for r in runs],
        "duplicates": [r["duplicates"] for r in runs],
    }


def arguments(description: str, port: int) -> argparse.ArgumentParser:
    """The options both many-hosts benchmarks take."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--latency", type=float, default=0.02)
    parser.add_argument("--delays", default="0,0.05")
    parser.add_argument("--engines", default="1,3")
    parser.add_argument("--per-host", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--port", type=int, default=port)
    parser.add_argument("--redis-for-one", action="store_true", help="one engine on Redis too")
    parser.add_argument(
        "--politeness",
        default="owner",
        choices=["owner", "engine"],
        help="how engines on Redis keep hosts polite: owned hosts, or each engine alone",
    )
    parser.add_argument("--out", type=Path, help="also append every JSON line here")
    parser.add_argument("--keep-logs", type=Path, help="copy each crawl's access log here")
    return parser


def run(
    args: argparse.Namespace,
    sites: list[tuple[str, str, str]],
    shown: Callable[[dict[str, Any]], dict[str, Any]] = lambda row: row,
) -> None:
    """Serve ``sites`` ((address, name, document root) each) with nginx and crawl them
    ``args.rounds`` times in every configuration, the order rotated every round; print
    ``shown(row)`` for each crawl, then a summary of each configuration."""
    from netdisco.testing import RedisServer, wait_port

    work = Path(tempfile.mkdtemp(prefix="many-hosts-"))
    conf = nginx_conf(work, [(a, root) for a, _, root in sites], args.port, args.latency)
    nginx = subprocess.Popen(["nginx", "-c", str(conf)])
    names = {address: name for address, name, _ in sites}
    try:
        for address in names:
            wait_port(address, args.port)
        with RedisServer() as redis_server:
            assert redis_server.process is not None
            pids = [nginx.pid, redis_server.process.pid]
            configs = [
                (int(e), float(d)) for d in args.delays.split(",") for e in args.engines.split(",")
            ]
            runs: dict[tuple[int, float], list[dict[str, Any]]] = defaultdict(list)
            for round_ in range(args.rounds):
                shift = round_ % len(configs)
                for engines, delay in configs[shift:] + configs[:shift]:
                    url = redis_server.url
                    row = crawl_once(args, work, names, engines, delay, url, pids[1:])
                    row["round"] = round_ + 1
                    row = shown(row)
                    emit(args, row)
                    runs[(engines, delay)].append(row)
            for config in configs:
                emit(args, {"summary": summary(runs[config])})
    finally:
        nginx.terminate()
        nginx.wait(10)
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    args = arguments(__doc__.splitlines()[0], 8480).parse_args()
    missing = [root for _, root in SITES if not Path(root).is_dir()]
    if missing or not Path(ECHO_MODULE).exists():
        sys.exit(f"missing: {', '.join(missing) or ECHO_MODULE} (see this file's docstring)")
    sites = [(a, name, root) for a, (name, root) in zip(addresses(len(SITES)), SITES, strict=True)]
    run(args, sites)


def emit(args: argparse.Namespace, row: dict[str, Any]) -> None:
    line = json.dumps(row)
    print(line, flush=True)
    if args.out is not None:
        with args.out.open("a") as out:
            out.write(line + "\n")


if __name__ == "__main__":
    main()
