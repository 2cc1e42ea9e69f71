"""``netdisco jobs``: start, list, show, follow, cancel and re-run jobs through a monitor.

It only speaks the monitor's HTTP routes (docs/http-api.md), with the monitor's
control token from ``$NETDISCO_MONITOR_TOKEN`` (``--token-env`` names another
variable), so it runs anywhere the monitor can be reached and needs no ZooKeeper.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

import aiohttp

from netdisco.crawl.settings import parse_pairs
from netdisco.exceptions import ConfigError

DEFAULT_MONITOR = "http://127.0.0.1:8316"


def add_jobs_parser(commands: Any, common: argparse.ArgumentParser) -> None:
    """The ``jobs`` command and its sub-commands."""
    jobs = commands.add_parser("jobs", parents=[common], help="run spiders as jobs on a cluster")
    jobs.add_argument(
        "--monitor",
        default=os.environ.get("NETDISCO_MONITOR", DEFAULT_MONITOR),
        help=f"the monitor's URL ($NETDISCO_MONITOR, else {DEFAULT_MONITOR})",
    )
    jobs.add_argument(
        "--token-env",
        default="NETDISCO_MONITOR_TOKEN",
        help="variable holding the monitor's control token",
    )
    sub = jobs.add_subparsers(dest="jobs_command", required=True)
    start = sub.add_parser("start", help="start a job")
    start.add_argument("project", help="a deployed project, or - for the engines' spider_modules")
    start.add_argument("spider", help="the spider (module:Class with -)")
    start.add_argument("-a", dest="args", action="append", default=[], metavar="NAME=VALUE")
    start.add_argument("-s", dest="settings", action="append", default=[], metavar="NAME=VALUE")
    start.add_argument(
        "--on", nargs="+", default=["any"], help="any, all, label=value, or engine ids"
    )
    start.add_argument("--on-lost", choices=("fail", "requeue"), default="fail")
    start.add_argument("--version", dest="project_version", help="a version (default: the default)")
    sub.add_parser("list", help="every job, newest first")
    for name, text in (("show", "one job"), ("cancel", "stop a job"), ("rerun", "start it again")):
        sub.add_parser(name, help=text).add_argument("id")
    log = sub.add_parser("log", help="a job's log")
    log.add_argument("id")
    log.add_argument("-f", "--follow", action="store_true", help="until the job ends")
    log.add_argument("--tail", type=int, default=100, help="lines from the end (100)")
    jobs.set_defaults(func=run_jobs)


def start_body(args: argparse.Namespace) -> dict[str, Any]:
    """The ``POST .../jobs`` body of ``netdisco jobs start``."""
    on: Any = args.on[0] if len(args.on) == 1 and args.on[0] in ("any", "all") else args.on
    if len(args.on) == 1 and "=" in args.on[0]:
        on = args.on[0]
    body: dict[str, Any] = {
        "spider": args.spider,
        "on": on,
        "on_lost": args.on_lost,
        "args": parse_pairs(args.args),
        "settings": parse_pairs(args.settings),
    }
    if args.project != "-":
        body["project"] = args.project
    if args.project_version:
        body["version"] = args.project_version
    return body


def _headers(args: argparse.Namespace) -> dict[str, str]:
    token = os.environ.get(args.token_env)
    return {"Authorization": f"Bearer {token}"} if token else {}


async def _call(session: aiohttp.ClientSession, method: str, url: str, body: Any = None) -> Any:
    async with session.request(method, url, json=body) as resp:
        data = await resp.json(content_type=None)
        if resp.status >= 400:
            error = data.get("error", {}) if isinstance(data, dict) else {}
            raise ConfigError("monitor", f"{resp.status} {error.get('message', data)}")
        return data


def _table(jobs: list[dict[str, Any]]) -> str:
    rows = [("ID", "STATE", "SPIDER", "ENGINE", "STARTED", "PAGES", "ITEMS")]
    for job in jobs:
        stats = job.get("stats") or {}
        started = job.get("started_at")
        when = time.strftime("%H:%M:%S", time.localtime(started)) if started else "-"
        rows.append(
            (
                job["id"],
                job["state"],
                job["spider"],
                job.get("engine") or "-",
                when,
                str(stats.get("succeeded", "-")),
                str(stats.get("items", "-")),
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows)


async def _log(session: aiohttp.ClientSession, url: str, args: argparse.Namespace) -> None:
    params = {"tail": str(args.tail), "follow": "1" if args.follow else "0"}
    async with session.get(url + "/log", params=params) as resp:
        if resp.status >= 400:
            raise ConfigError("monitor", f"{resp.status} {await resp.text()}")
        async for chunk in resp.content.iter_any():
            sys.stdout.buffer.write(chunk)
            sys.stdout.flush()


async def run_jobs(args: argparse.Namespace) -> int:
    """Do one ``netdisco jobs`` sub-command; 0, or 2 with the monitor's reason."""
    base = args.monitor.rstrip("/") + "/netdiscovery/monitor/jobs"
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=10)
    async with aiohttp.ClientSession(headers=_headers(args), timeout=timeout) as session:
        command = args.jobs_command
        if command == "log":
            await _log(session, f"{base}/{args.id}", args)
            return 0
        if command == "start":
            made = await _call(session, "POST", base, start_body(args))
            print("\n".join(job["id"] for job in made["jobs"]))
        elif command == "list":
            print(_table((await _call(session, "GET", base))["jobs"]))
        elif command == "show":
            print(json.dumps(await _call(session, "GET", f"{base}/{args.id}"), indent=2))
        else:  # cancel, rerun
            job = await _call(session, "POST", f"{base}/{args.id}/{command}")
            print(f"{job['id']} {job['state']}")
    return 0
