"""1, 2 and 4 engines sharing one Redis frontier on a slow site: do they scale?

Usage: .venv/bin/python bench/redis_bench.py [--pages 4000] [--delay 0.05]
       [--concurrency 16] [--engines 1,2,4] [--site DIR] [--repeat 3]

Generates the site (``gen_site.py``), serves it with a fixed latency per response
from a separate process, starts a private ``redis-server``, then for each N runs
N engine processes (a ``Crawler`` on a ``RedisFrontier``, concurrency 16 each).
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
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import redis
import structlog

#: the crawl benchmark harness (bench/harness/)
GEN_SITE = Path(__file__).resolve().parent / "harness" / "gen_site.py"
HERE = Path(__file__).resolve()


async def serve(root: str, port: int, delay: float) -> None:
    """The slow site: every page from memory after ``delay`` seconds."""
    from aiohttp import web

    base = Path(root)
    pages = {"/" + str(p.relative_to(base)): p.read_bytes() for p in base.rglob("*.html")}  # noqa: ASYNC240 - before serving

    async def handle(request: web.BaseRequest) -> web.StreamResponse:
        await asyncio.sleep(delay)
        body = pages.get(request.path)
        if body is None:
            return web.Response(status=404)
        return web.Response(body=body, content_type="text/html")

    runner = web.ServerRunner(web.Server(handle), access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port, backlog=4096).start()
    print("serving", flush=True)
    await asyncio.Event().wait()


async def engine(redis_url: str, base: str, concurrency: int) -> None:
    """One engine: connect, say ready, crawl on "go", report."""
    from netdisco import Crawler, Settings
    from netdisco.crawl.codec import RequestCodec
    from netdisco.frontiers.redis import RedisFrontier, RedisOptions

    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(30))
    spider = _spider(base)
    memory = redis_url == "memory"
    options = None if memory else RedisOptions.from_url(redis_url)
    frontier = (
        None if options is None else RedisFrontier(options, spider.name, RequestCodec(spider))
    )
    settings = Settings(
        frontier="memory" if memory else redis_url,
        concurrency=concurrency,
        per_host_concurrency=concurrency,
        obey_robots=False,
        progress_interval=0,
        retries=0,
    )
    crawler = Crawler(spider, settings, frontier=frontier)
    empty = _count_empty_takes(crawler)
    if frontier is not None:
        await frontier.open()
    print("ready", flush=True)
    await asyncio.to_thread(sys.stdin.readline)
    started, cpu = time.time(), time.process_time()
    stats = await crawler.run()
    finished, cpu = time.time(), time.process_time() - cpu
    trips = 0 if frontier is None else frontier.round_trips
    if frontier is not None:
        await frontier.close()
    result = {"pages": stats.succeeded, "start": started, "end": finished, "round_trips": trips}
    result["cpu"] = cpu
    result["empty_takes"] = empty[0]
    print(json.dumps(result), flush=True)


def _count_empty_takes(crawler: Any) -> list[int]:
    """How often workers found the shared queue empty (the counter is in the list)."""
    empty = [0]
    take = crawler.frontier.take

    async def counted_take() -> Any:
        request = await take()
        empty[0] += request is None
        return request

    crawler.frontier.take = counted_take
    return empty


def _spider(base: str) -> Any:
    from netdisco import Response, Spider

    class Site(Spider):
        name = "bench"
        allowed_domains = ("127.0.0.1",)

        def parse(self, response: Response) -> Iterator[Any]:
            yield {"url": response.url}
            for href in response.css("a::attr(href)").getall():
                yield response.follow(href, callback=self.parse)

    return Site(start_urls=[f"{base}/index.html"])


def spawn(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(HERE), *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=HERE.parents[1],
    )


def run_engines(count: int, redis_url: str, base: str, concurrency: int) -> list[dict[str, Any]]:
    procs = [spawn("engine", redis_url, base, str(concurrency)) for _ in range(count)]
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


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process so far (Linux ``/proc``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure(
    count: int,
    server_url: str,
    base: str,
    concurrency: int,
    pids: dict[str, int],
    *,
    memory: bool = False,
    options: str = "",
) -> dict[str, Any]:
    """One run of ``count`` engines sharing a Redis frontier, or, with ``memory``, of
    ``count`` independent in-memory crawls of the whole site: what this machine can do
    with that many engines' work, the yardstick for the shared crawl."""
    client = redis.Redis.from_url(server_url)
    commands_before = int(client.info("stats")["total_commands_processed"])
    url = "memory" if memory else f"{server_url}?prefix=bench{uuid.uuid4().hex[:8]}&{options}"
    before = {name: cpu_seconds(pid) for name, pid in pids.items()}
    results = run_engines(count, url, base, concurrency)
    used = {name: cpu_seconds(pid) - before[name] for name, pid in pids.items()}
    commands = int(client.info("stats")["total_commands_processed"]) - commands_before
    client.close()
    pages = sum(r["pages"] for r in results)
    seconds = max(r["end"] for r in results) - min(r["start"] for r in results)
    return {
        "engines": count,
        "pages": pages,
        "seconds": round(seconds, 2),
        "pages_per_second": round(pages / seconds, 1),
        "per_engine": [r["pages"] for r in results],
        "round_trips_per_page": round(sum(r["round_trips"] for r in results) / pages, 2),
        "empty_takes": sum(r["empty_takes"] for r in results),
        "redis_commands_per_page": round(commands / pages, 2),
        "engine_cpu_ms_per_page": round(1000 * sum(r["cpu"] for r in results) / pages, 2),
        "engine_cpu_share_of_machine": round(
            sum(r["cpu"] for r in results) / seconds / (os.cpu_count() or 1), 2
        ),
        **{f"{name}_cpu_share_of_one_core": round(used[name] / seconds, 2) for name in used},
    }


def scale(args: argparse.Namespace, redis_url: str, base: str, pids: dict[str, int]) -> None:
    """One JSON line per engine count: the median of ``--repeat`` runs."""
    one = None
    for count in (int(n) for n in args.engines.split(",")):
        runs = [
            measure(count, redis_url, base, args.concurrency, pids, options=args.options)
            for _ in range(args.repeat)
        ]
        runs.sort(key=lambda r: float(r["pages_per_second"]))
        row = runs[len(runs) // 2]
        row["all_pages_per_second"] = [r["pages_per_second"] for r in runs]
        one = one or row["pages_per_second"] / count
        row["ratio_to_one"] = round(row["pages_per_second"] / one, 2)
        row["target"] = round(0.9 * count, 2)
        print(json.dumps(row), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=4000)
    parser.add_argument("--delay", type=float, default=0.05)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--engines", default="1,2,4")
    parser.add_argument("--site", type=Path)
    parser.add_argument(
        "--baseline",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also run N independent in-memory crawls (the machine's capacity)",
    )
    parser.add_argument("--options", default="", help="frontier URL options, e.g. prefetch=1")
    parser.add_argument("--repeat", type=int, default=1, help="runs per N; the median is kept")
    args = parser.parse_args()
    from netdisco.testing import RedisServer, free_port, wait_port

    site = args.site or Path(tempfile.mkdtemp(prefix="redis-bench-site-"))
    if not (site / "index.html").exists():
        gen = [sys.executable, str(GEN_SITE), "--out", str(site), "--pages", str(args.pages)]
        subprocess.run(gen, check=True, capture_output=True)
    port = free_port()
    server = spawn("serve", str(site), str(port), str(args.delay))
    wait_port("127.0.0.1", port)
    try:
        with RedisServer() as redis_server:
            base = f"http://127.0.0.1:{port}"
            assert redis_server.process is not None
            pids = {"site_server": server.pid, "redis": redis_server.process.pid}
            for count in (int(n) for n in args.engines.split(",")) if args.baseline else ():
                row = measure(count, redis_server.url, base, args.concurrency, pids, memory=True)
                print(json.dumps({"independent_memory_crawls": row}), flush=True)
            scale(args, redis_server.url, base, pids)
    finally:
        server.terminate()
        server.wait(10)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "serve":
        asyncio.run(serve(sys.argv[2], int(sys.argv[3]), float(sys.argv[4])))
    elif len(sys.argv) > 1 and sys.argv[1] == "engine":
        asyncio.run(engine(sys.argv[2], sys.argv[3], int(sys.argv[4])))
    else:
        main()
