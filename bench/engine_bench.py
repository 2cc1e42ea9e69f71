"""How much does polling the engine's HTTP endpoint slow its crawl? (a benchmark, not a test)

An engine crawls the 20,000-page bench site (``bench/harness/gen_site.py``,
served by nginx on loopback) at full speed. After a warm-up, ``wrk`` hits
``GET /netdiscovery/spiders`` for ``--window`` seconds while the crawl goes on;
the same window without wrk is the baseline. Reported per run: the crawl's
pages/s inside the window, wrk's requests/s and p99 latency, and the slowdown.

    .venv/bin/python bench/engine_bench.py --connections 8,16,64 --rounds 2

Each crawl runs in its own child process (``--child``) so runs do not share a heap.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

#: the crawl benchmark harness (bench/harness/)
GEN_SITE = Path(__file__).resolve().parent / "harness" / "gen_site.py"
NGINX_CONF = """
worker_processes 1;
daemon off;
pid {run}/nginx.pid;
error_log {run}/nginx-error.log warn;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    log_not_found off;
    sendfile on;
    tcp_nopush on;
    tcp_nodelay on;
    keepalive_requests 1000000;
    types {{ text/html html; }}
    client_body_temp_path {run}/body;
    proxy_temp_path {run}/proxy;
    fastcgi_temp_path {run}/fastcgi;
    uwsgi_temp_path {run}/uwsgi;
    scgi_temp_path {run}/scgi;
    server {{
        listen 127.0.0.1:{port} backlog=4096;
        root {site};
        location / {{ try_files $uri =404; }}
    }}
}}
"""


# -- the child: one engine, one crawl, an optional wrk load in the middle -------------


def raise_open_files_limit() -> None:
    """Hundreds of wrk connections plus the crawl's own exceed the usual 1024 descriptors."""
    import resource

    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def bench_spider(start_url: str) -> Any:
    """The bench harness's spider: the site's three item fields, every in-site link."""
    from netdisco import Response, Spider

    class Bench(Spider):
        name = "bench"
        start_urls = (start_url,)
        allowed_domains = ("127.0.0.1",)

        def parse(self, response: Response) -> Iterator[Any]:
            product = response.css("div.product")
            yield {
                "url": response.url,
                "title": product.css("h1.product-title::text").get(),
                "price": product.css("span.price::text").get(),
                "sku": product.css("span.sku::text").get(),
            }
            for href in response.css("a::attr(href)").getall():
                yield response.follow(href, callback=self.parse)

    return Bench()


async def child(args: argparse.Namespace) -> dict[str, Any]:
    """Crawl the whole site; measure the window (with wrk, or idle) in the middle of it."""
    from netdisco.crawl.settings import Settings
    from netdisco.engine import SpiderEngine
    from netdisco.engine.config import EngineSettings

    settings = Settings(
        concurrency=64, per_host_concurrency=64, obey_robots=False, progress_interval=0
    )
    engine = SpiderEngine(
        EngineSettings(
            port=args.engine_port, status_cache=args.status_cache, api_process=args.api_process
        )
    )
    crawler = engine.add_spider(bench_spider(args.start_url), settings)
    await engine.start()
    await asyncio.sleep(args.warmup)
    pages0, t0, cpu0 = crawler.stats.succeeded, time.monotonic(), time.process_time()
    side0 = status_process_cpu(engine)
    wrk = None
    if args.wrk_connections:
        wrk = await run_wrk(args)
    else:
        await asyncio.sleep(args.window)
    pages1, t1, cpu1 = crawler.stats.succeeded, time.monotonic(), time.process_time()
    side_cpu = status_process_cpu(engine) - side0
    await engine.wait()
    await engine.stop()
    return {
        "connections": args.wrk_connections,
        "window_pages_per_s": round((pages1 - pages0) / (t1 - t0), 1),
        "window_pages": pages1 - pages0,
        "window_cpu_s": round(cpu1 - cpu0, 2),
        "status_process_cpu_s": round(side_cpu, 2),
        "pages_per_cpu_s": round((pages1 - pages0) / max(cpu1 - cpu0, 1e-9), 1),
        "total_pages": crawler.stats.succeeded,
        "failed": crawler.stats.failed,
        "state": str(crawler.state),
        "wrk": wrk,
    }


#: wrk's hook for a fixed pace: milliseconds each connection waits between requests
WRK_DELAY = "function delay() return {ms} end\n"


def status_process_cpu(engine: Any) -> float:
    """CPU seconds used so far by the engine's status process (0 if it has none)."""
    proc = getattr(getattr(engine, "_http", None), "_proc", None)
    if proc is None:
        return 0.0
    fields = Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def run_wrk(args: argparse.Namespace) -> dict[str, Any]:
    url = f"http://127.0.0.1:{args.engine_port}/netdiscovery/spiders"
    pace: list[str] = []
    if args.wrk_delay_ms:
        script = Path(tempfile.mkdtemp()) / "pace.lua"
        script.write_text(WRK_DELAY.format(ms=args.wrk_delay_ms))
        pace = ["-s", str(script)]
    proc = await asyncio.create_subprocess_exec(
        "wrk", "-t1", f"-c{args.wrk_connections}", f"-d{args.window}s", "--latency", *pace, url,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    out, _ = await proc.communicate()
    return parse_wrk(out.decode())


def parse_wrk(text: str) -> dict[str, Any]:
    rps = re.search(r"Requests/sec:\s+([\d.]+)", text)
    p99 = re.search(r"99%\s+([\d.]+)(us|ms|s)", text)
    errors = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", text)
    scale = {"us": 0.001, "ms": 1.0, "s": 1000.0}
    return {
        "requests_per_s": float(rps.group(1)) if rps else None,
        "p99_ms": round(float(p99.group(1)) * scale[p99.group(2)], 2) if p99 else None,
        "non_2xx": int(errors.group(1)) if errors else 0,
    }


# -- the parent: site, nginx, runs, table ---------------------------------------------


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def ensure_site(site: Path, pages: int) -> None:
    meta = site / "_meta" / "site.json"
    if meta.exists() and json.loads(meta.read_text()).get("pages") == pages:
        return
    subprocess.run(
        [sys.executable, str(GEN_SITE), "--out", str(site), "--pages", str(pages)], check=True
    )


def start_nginx(site: Path, port: int) -> tuple[subprocess.Popen[bytes], Path]:
    run = Path(tempfile.mkdtemp(prefix="engine-bench-nginx-"))
    conf = run / "nginx.conf"
    conf.write_text(NGINX_CONF.format(run=run, port=port, site=site.resolve()))
    proc = subprocess.Popen(["nginx", "-c", str(conf), "-p", str(run), "-e", str(run / "err.log")])
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            import socket

            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return proc, run
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise RuntimeError("nginx did not start")


def one_run(args: argparse.Namespace, start_url: str, connections: int) -> dict[str, Any]:
    cmd = [
        sys.executable, __file__, "--child", "--start-url", start_url,
        "--engine-port", str(free_port()), "--wrk-connections", str(connections),
        "--window", str(args.window), "--warmup", str(args.warmup),
        "--status-cache", str(args.status_cache), "--wrk-delay-ms", str(args.wrk_delay_ms),
        *(["--api-process"] if args.api_process else []),
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    done = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env)
    line = [x for x in done.stdout.splitlines() if x.startswith("ENGINE_BENCH ")][-1]
    result: dict[str, Any] = json.loads(line.removeprefix("ENGINE_BENCH "))
    return result


def report(results: list[dict[str, Any]]) -> None:
    """Slowdown against the same round's baseline, by wall clock and by CPU.

    The wall-clock figure is what a user sees, but other processes on a shared
    machine move it a lot; pages per CPU second of the engine process is what the
    HTTP load itself costs the crawl, whoever else runs.
    """
    print(
        "| wrk c | requests/s | p99 ms | pages/s | baseline | slowdown "
        "| pages/CPU-s | base | CPU slowdown |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    base: dict[str, Any] = {}
    summary: dict[int, list[tuple[float, float, float]]] = {}
    for r in results:
        if not r["connections"]:
            base = r
            continue
        slow = 100 * (1 - r["window_pages_per_s"] / base["window_pages_per_s"])
        cpu_slow = 100 * (1 - r["pages_per_cpu_s"] / base["pages_per_cpu_s"])
        w = r["wrk"]
        summary.setdefault(r["connections"], []).append((w["requests_per_s"], slow, cpu_slow))
        print(
            f"| {r['connections']} | {w['requests_per_s']:.0f} | {w['p99_ms']} "
            f"| {r['window_pages_per_s']:.0f} | {base['window_pages_per_s']:.0f} | {slow:.1f} % "
            f"| {r['pages_per_cpu_s']:.0f} | {base['pages_per_cpu_s']:.0f} | {cpu_slow:.1f} % |"
        )
    for connections, rows in summary.items():
        rps, slow, cpu = (statistics.median(column) for column in zip(*rows, strict=True))
        print(
            f"c={connections}, median of {len(rows)}: {rps:.0f} requests/s, "
            f"wall slowdown {slow:.1f} %, CPU slowdown {cpu:.1f} %"
        )


def parent(args: argparse.Namespace) -> None:
    if not shutil.which("wrk") or not shutil.which("nginx"):
        sys.exit("needs wrk and nginx (Debian packages wrk, nginx-light)")
    ensure_site(args.site, args.pages)
    port = free_port()
    nginx, run = start_nginx(args.site, port)
    start_url = f"http://127.0.0.1:{port}/index.html"
    results = []
    try:
        for _ in range(args.rounds):
            for connections in [0, *args.connections]:
                result = one_run(args, start_url, connections)
                print(json.dumps(result), flush=True)
                results.append(result)
    finally:
        nginx.send_signal(signal.SIGQUIT)
        nginx.wait(10)
        shutil.rmtree(run, ignore_errors=True)
    report(results)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--start-url", help=argparse.SUPPRESS)
    parser.add_argument("--engine-port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--wrk-connections", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--site", type=Path, default=Path("/tmp/site"))
    parser.add_argument("--pages", type=int, default=20000)
    parser.add_argument(
        "--connections", type=lambda s: [int(x) for x in s.split(",")], default=[16]
    )
    parser.add_argument("--window", type=int, default=10, help="seconds of wrk load")
    parser.add_argument("--warmup", type=float, default=2.0, help="seconds of crawl before")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--status-cache", type=float, default=0.1, help="engine.status_cache")
    parser.add_argument(
        "--api-process", action="store_true", help="engine.api_process: serve from a child"
    )
    parser.add_argument(
        "--wrk-delay-ms",
        type=float,
        default=0,
        help="each wrk connection waits this long between requests (a fixed rate: "
        "about connections * 1000 / (delay + latency) requests/s); 0 = flat out",
    )
    args = parser.parse_args()
    if args.child:
        raise_open_files_limit()
        print("ENGINE_BENCH " + json.dumps(asyncio.run(child(args))), flush=True)
    else:
        parent(args)


if __name__ == "__main__":
    main()
