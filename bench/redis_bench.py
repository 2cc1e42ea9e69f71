"""1, 2 and 4 engines sharing one Redis frontier on a slow site: do they scale?

Usage: .venv/bin/python bench/redis_bench.py [--pages 4000] [--delay 0.05]
       [--concurrency 16] [--engines 1,2,4] [--site DIR] [--repeat 3]
       [--hosts 4] [--per-host 16] [--download-delay 0] [--options politeness=engine]
       [--cluster] [--no-shared]

Generates the site (``gen_site.py``), serves it with a fixed latency per response
from a separate process on ``--hosts`` loopback addresses (127.0.0.1, .2, ...;
each a host of its own with the whole site, so a crawl has hosts x pages pages),
starts a private ``redis-server`` (with ``--cluster``, a Redis Cluster of 3 masters and
3 replicas, the frontier's hosts over its 256 buckets), then for each N runs N engine
processes (a
``Crawler`` on the frontier the URL names: owned hosts unless
``--options politeness=engine``, concurrency 16 each). With ``--download-delay``
politeness is the limit: each row also gives the time the delay imposes, pages
per host x (delay + latency) (a host's next start waits for its last end).
Engines import and connect first, then start together on a "go" line, so start-up
is not timed. Prints one JSON line per N: pages/s, the ratio to one engine and
the target ``0.9 N``, Redis round trips per page (counted by the frontier) and
Redis commands per page (``INFO``: a Lua script counts once plus its calls).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import redis
import structlog
from pages import load_pages, serve_pages

#: the crawl benchmark harness (bench/harness/)
GEN_SITE = Path(__file__).resolve().parent / "harness" / "gen_site.py"
HERE = Path(__file__).resolve()


def addresses(hosts: int) -> list[str]:
    return [f"127.0.0.{n}" for n in range(1, hosts + 1)]


async def engine(redis_url: str, bases: str, concurrency: int, delay: float, per_host: int) -> None:
    """One engine: connect, say ready, crawl on "go", report."""
    from netdisco import Crawler, Settings
    from netdisco.crawl.crawler import frontier_for
    from netdisco.frontiers.redis import RedisFrontier

    structlog.configure(  # stdout carries the report
        wrapper_class=structlog.make_filtering_bound_logger(30),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
    )
    spider = _spider(bases.split(","))
    memory = redis_url == "memory"
    settings = Settings(
        frontier="memory" if memory else redis_url,
        concurrency=concurrency,
        per_host_concurrency=per_host,
        download_delay=delay,
        obey_robots=False,
        progress_interval=0,
        retries=0,
    )
    shared = None if memory else frontier_for(settings, spider, None)
    frontier = shared if isinstance(shared, RedisFrontier) else None
    crawler = Crawler(spider, settings, frontier=shared)
    takes = _count_takes(crawler)
    trips_by = _count_round_trips(frontier) if frontier is not None else {}
    if frontier is not None:
        await frontier.open()
    print("ready", flush=True)
    await asyncio.to_thread(sys.stdin.readline)
    started, cpu = time.time(), time.process_time()
    samples: list[float] = []
    backs: list[int] = []
    sampler = asyncio.create_task(_sample_each_second(samples, backs, crawler))
    stats = await crawler.run()
    finished, cpu = time.time(), time.process_time() - cpu
    sampler.cancel()
    trips = 0 if frontier is None else frontier.round_trips
    if frontier is not None:
        await frontier.close()
    result = {"pages": stats.succeeded, "start": started, "end": finished, "round_trips": trips}
    result["cpu"] = cpu
    result["empty_takes"], result["takes"] = takes
    result["sent_back"] = crawler.politeness.hosts.sent_back  # taken, no room: given back
    result["round_trips_by"] = dict(trips_by)
    result["idle_share"] = stats.idle_share
    result["cpu_each_second"] = samples
    result["sent_back_each_second"] = backs
    print(json.dumps(result), flush=True)


async def _sample_each_second(samples: list[float], backs: list[int], crawler: Any) -> None:
    """The engine's CPU seconds in each wall second of the crawl (a late tick still
    counts its second: the loop was busy, which is what is measured), and the requests
    it gave back unstarted in each."""
    last, last_back = time.process_time(), 0
    while True:
        await asyncio.sleep(1.0)
        now, back = time.process_time(), crawler.politeness.hosts.sent_back
        samples.append(round(now - last, 3))
        backs.append(back - last_back)
        last, last_back = now, back


def _count_round_trips(frontier: Any) -> Counter[str]:
    """Round trips by the frontier method that made them (the crawl counts only the
    total): where to look first when a page costs too many."""
    made: Counter[str] = Counter()
    call = frontier._call

    async def counted(operation: Any) -> Any:
        made[sys._getframe(1).f_code.co_name] += 1
        return await call(operation)

    frontier._call = counted
    return made


def _count_takes(crawler: Any) -> list[int]:
    """How often workers found the queue empty, and how often they took (the counters
    are in the list)."""
    counts = [0, 0]
    take = crawler.frontier.take

    async def counted_take() -> Any:
        request = await take()
        counts[0] += request is None
        counts[1] += 1
        return request

    crawler.frontier.take = counted_take
    return counts


def _spider(bases: list[str]) -> Any:
    from netdisco import Response, Spider

    class Site(Spider):
        name = "bench"
        allowed_domains = tuple(urlsplit(base).hostname or "" for base in bases)  # loopback only

        def parse(self, response: Response) -> Iterator[Any]:
            yield {"url": response.url}
            for href in response.css("a::attr(href)").getall():
                yield response.follow(href, callback=self.parse)

    return Site(start_urls=[f"{base}/index.html" for base in bases])


def spawn(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(HERE), *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=HERE.parents[1],
    )


def run_engines(count: int, redis_url: str, crawl: list[str]) -> list[dict[str, Any]]:
    """``crawl``: the engine's arguments after the frontier URL (see ``engine``)."""
    procs = [spawn("engine", redis_url, *crawl) for _ in range(count)]
    for proc in procs:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
    for proc in procs:
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()
    results = []
    for proc in procs:
        assert proc.stdout is not None
        results.append(json.loads(proc.stdout.readline()))
        proc.wait(30)
    return results


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU of processes so far (Linux ``/proc``)."""
    total = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def commands(nodes: list[str]) -> int:
    """Commands the Redis servers (the masters of a cluster) have processed so far."""
    total = 0
    for node in nodes:
        client = redis.Redis.from_url(node)
        total += int(client.info("stats")["total_commands_processed"])
        client.close()
    return total


def measure(
    count: int,
    server_url: str,
    crawl: list[str],
    pids: dict[str, list[int]],
    *,
    nodes: list[str],
    memory: bool = False,
    options: str = "",
) -> dict[str, Any]:
    """One run of ``count`` engines sharing a Redis frontier, or, with ``memory``, of
    ``count`` independent in-memory crawls of the whole site: what this machine can do
    with that many engines' work, the yardstick for the shared crawl."""
    commands_before = commands(nodes)
    url = "memory" if memory else f"{server_url}?prefix=bench{uuid.uuid4().hex[:8]}&{options}"
    before = {name: cpu_seconds(some) for name, some in pids.items()}
    results = run_engines(count, url, crawl)
    used = {name: cpu_seconds(some) - before[name] for name, some in pids.items()}
    sent = commands(nodes) - commands_before
    pages = sum(r["pages"] for r in results)
    seconds = max(r["end"] for r in results) - min(r["start"] for r in results)
    return {
        "engines": count,
        "engines_crawling": count if memory else 1,  # a shared crawl is one crawl
        "pages": pages,
        "seconds": round(seconds, 2),
        "pages_per_second": round(pages / seconds, 1),
        "per_engine": [r["pages"] for r in results],
        "round_trips_per_page": round(sum(r["round_trips"] for r in results) / pages, 2),
        "empty_takes": sum(r["empty_takes"] for r in results),
        "redis_commands_per_page": round(sent / pages, 2),
        "engine_cpu_ms_per_page": round(1000 * sum(r["cpu"] for r in results) / pages, 2),
        "engine_cpu_share_of_machine": round(
            sum(r["cpu"] for r in results) / seconds / (os.cpu_count() or 1), 2
        ),
        **{f"{name}_cpu_share_of_one_core": round(used[name] / seconds, 2) for name in used},
    }


def scale(
    args: argparse.Namespace,
    redis_url: str,
    crawl: list[str],
    pids: dict[str, list[int]],
    nodes: list[str],
) -> None:
    """One JSON line per engine count: the median of ``--repeat`` runs."""
    one = None
    for count in (int(n) for n in args.engines.split(",")):
        runs = [
            measure(count, redis_url, crawl, pids, nodes=nodes, options=args.options)
            for _ in range(args.repeat)
        ]
        runs.sort(key=lambda r: float(r["pages_per_second"]))
        row = runs[len(runs) // 2]
        row["all_pages_per_second"] = [r["pages_per_second"] for r in runs]
        one = one or row["pages_per_second"] / count
        row["ratio_to_one"] = round(row["pages_per_second"] / one, 2)
        row["target"] = round(0.9 * count, 2)
        politeness_bound(args, row)
        print(json.dumps(row), flush=True)


def politeness_bound(args: argparse.Namespace, row: dict[str, Any]) -> None:
    """With a delay, or one slot a host, politeness is the limit: each host's pages one
    after another, each its delay plus the latency. Adds the bound and the ratio to it."""
    if args.download_delay or args.per_host == 1:
        bound = row["pages"] / row["engines_crawling"] / args.hosts
        bound *= args.download_delay + args.delay
        row["delay_bound_seconds"] = round(bound, 2)
        row["ratio_to_delay_bound"] = round(row["seconds"] / bound, 2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=4000)
    parser.add_argument("--delay", type=float, default=0.05)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--engines", default="1,2,4")
    parser.add_argument("--site", type=Path)
    parser.add_argument("--hosts", type=int, default=4, help="loopback addresses, one host each")
    parser.add_argument("--per-host", type=int, default=0, help="default: --concurrency")
    parser.add_argument("--download-delay", type=float, default=0.0)
    parser.add_argument(
        "--baseline",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also run N independent in-memory crawls (the machine's capacity)",
    )
    parser.add_argument(
        "--shared",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="run the shared crawls (--no-shared: only the in-memory ones)",
    )
    parser.add_argument("--options", default="", help="frontier URL options, e.g. prefetch=1")
    parser.add_argument("--repeat", type=int, default=1, help="runs per N; the median is kept")
    parser.add_argument("--cluster", action="store_true", help="a Redis Cluster, 3 + 3 nodes")
    args = parser.parse_args()
    from netdisco.testing import RedisClusterServer, RedisServer, free_port, wait_port

    site = args.site or Path(tempfile.mkdtemp(prefix="redis-bench-site-"))
    if not (site / "index.html").exists():
        gen = [sys.executable, str(GEN_SITE), "--out", str(site), "--pages", str(args.pages)]
        subprocess.run(gen, check=True, capture_output=True)
    port = free_port()
    server = spawn("serve", str(site), str(port), str(args.delay), str(args.hosts))
    wait_port("127.0.0.1", port)
    try:
        with RedisClusterServer() if args.cluster else RedisServer() as redis_server:
            bases = ",".join(f"http://{a}:{port}" for a in addresses(args.hosts))
            per_host = str(args.per_host or args.concurrency)
            crawl = [bases, str(args.concurrency), str(args.download_delay), per_host]
            every = getattr(redis_server, "nodes", [redis_server])
            masters = getattr(redis_server, "masters", lambda: every)()
            nodes = [f"redis://{n.host}:{n.port}/0" for n in masters]
            pids = {"site_server": [server.pid], "redis": [n.process.pid for n in every]}
            for count in (int(n) for n in args.engines.split(",")) if args.baseline else ():
                row = measure(count, redis_server.url, crawl, pids, nodes=nodes, memory=True)
                politeness_bound(args, row)
                print(json.dumps({"independent_memory_crawls": row}), flush=True)
            if args.shared:
                scale(args, redis_server.url, crawl, pids, nodes)
    finally:
        server.terminate()
        server.wait(10)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "serve":
        pages = load_pages(Path(sys.argv[2]))
        hosts = addresses(int(sys.argv[5]))
        asyncio.run(serve_pages(pages, int(sys.argv[3]), delay=float(sys.argv[4]), hosts=hosts))
    elif len(sys.argv) > 1 and sys.argv[1] == "engine":
        url, bases, concurrency, delay, per_host = sys.argv[2:7]
        asyncio.run(engine(url, bases, int(concurrency), float(delay), int(per_host)))
    else:
        main()
