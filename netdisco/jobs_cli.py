"""``netdisco jobs``: start, list, show, follow, cancel and re-run jobs through a monitor,
and keep their schedules (``netdisco jobs schedule``).

It only speaks the monitor's HTTP routes (docs/http-api.md), with the monitor's
control token from ``$NETDISCO_MONITOR_TOKEN`` (``--token-env`` names another
variable), so it runs anywhere the monitor can be reached and needs no ZooKeeper.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import time
from collections.abc import Sequence
from typing import Any
from urllib.parse import quote

import aiohttp

from netdisco.crawl.settings import parse_pairs
from netdisco.exceptions import ConfigError, ControlRefused

DEFAULT_MONITOR = "http://127.0.0.1:8316"


def _monitor_options(parser: argparse.ArgumentParser, *, defaults: bool) -> None:
    """``--monitor`` and ``--token-env``; a sub-command's copy has no defaults, so that it
    only overrides what was given (before the sub-command or after it)."""
    unset = argparse.SUPPRESS
    parser.add_argument(
        "--monitor",
        default=os.environ.get("NETDISCO_MONITOR", DEFAULT_MONITOR) if defaults else unset,
        help=f"the monitor's URL ($NETDISCO_MONITOR, else {DEFAULT_MONITOR})",
    )
    parser.add_argument(
        "--token-env",
        default="NETDISCO_MONITOR_TOKEN" if defaults else unset,
        help="variable holding the monitor's control token ($NETDISCO_MONITOR_TOKEN)",
    )


def _share_options(parser: argparse.ArgumentParser) -> None:
    """Give every sub-command below ``parser`` (at any depth) the monitor options: a
    sub-command added later gets them without a line of its own."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in set(action.choices.values()):
                _monitor_options(child, defaults=False)
                _share_options(child)


def add_jobs_parser(commands: Any, common: argparse.ArgumentParser) -> None:
    """The ``jobs`` command and its sub-commands."""
    jobs = commands.add_parser("jobs", parents=[common], help="run spiders as jobs on a cluster")
    _monitor_options(jobs, defaults=True)
    sub = jobs.add_subparsers(dest="jobs_command", required=True)
    _add_request(sub.add_parser("start", help="start a job"))
    _add_command_request(sub.add_parser("run", help="start a job of a project's command"))
    sub.add_parser("list", help="every job, newest first")
    for name, text in (("show", "one job"), ("cancel", "stop a job"), ("rerun", "start it again")):
        sub.add_parser(name, help=text).add_argument("id")
    log = sub.add_parser("log", help="a job's log")
    log.add_argument("id")
    log.add_argument("-f", "--follow", action="store_true", help="until the job ends")
    log.add_argument("--tail", type=int, default=100, help="lines from the end (100)")
    _add_schedule_parser(sub)
    _add_data_parsers(sub)
    _share_options(jobs)
    jobs.set_defaults(func=run_jobs)


def _add_data_parsers(sub: Any) -> None:
    """``spiders`` (a project's spiders by name) and ``items`` (a job's kept items)."""
    spiders = sub.add_parser("spiders", help="a deployed project's spiders: name and class")
    spiders.add_argument("project")
    spiders.add_argument("--version", dest="project_version", help="a version (the default)")
    items = sub.add_parser("items", help="a job's kept items: a page, or all of them")
    items.add_argument("id")
    items.add_argument("--format", choices=("jsonl", "csv"), default="jsonl")
    items.add_argument("--offset", type=int, default=0, help="items to skip (0)")
    items.add_argument("--limit", type=int, help="items to print (default: all)")


def _add_request(parser: argparse.ArgumentParser) -> None:
    """The arguments of a job request (``start``, ``schedule add``)."""
    parser.add_argument("project", help="a deployed project, or - for the engines' spider_modules")
    parser.add_argument("spider", help="the spider's name, or module:Class")
    parser.add_argument("-a", dest="args", action="append", default=[], metavar="NAME=VALUE")
    _add_placement(parser)


def _add_command_request(parser: argparse.ArgumentParser) -> None:
    """``run PROJECT COMMAND [-- ARG ...]``: a command the project declares, its arguments."""
    parser.add_argument("project", help="a deployed project")
    parser.add_argument(
        "job_command", metavar="command", help="a command of [tool.netdisco.commands]"
    )
    parser.add_argument("argv", nargs=argparse.REMAINDER, metavar="ARG", help="its arguments")
    _add_placement(parser)


def _add_placement(parser: argparse.ArgumentParser) -> None:
    """Settings, placement and version: what every job request takes."""
    parser.add_argument("-s", dest="settings", action="append", default=[], metavar="NAME=VALUE")
    parser.add_argument(
        "--on", nargs="+", default=["any"], help="any, all, label=value, or engine ids"
    )
    parser.add_argument("--on-lost", choices=("fail", "requeue"), default="fail")
    parser.add_argument(
        "--version", dest="project_version", help="a version (default: the default)"
    )


def _add_schedule_parser(sub: Any) -> None:
    schedule = sub.add_parser("schedule", help="start jobs on a cron or an interval")
    commands = schedule.add_subparsers(dest="schedule_command", required=True)
    add = commands.add_parser("add", help="a new schedule; prints its id")
    _add_request(add)
    when = add.add_mutually_exclusive_group(required=True)
    when.add_argument("--cron", help='a cron expression in UTC, e.g. "0 */6 * * *"')
    when.add_argument("--every", help="an interval: 30s, 10m, 6h, 1d")
    add.add_argument("--disabled", action="store_true", help="create it disabled")
    commands.add_parser("list", help="every schedule")
    for name, text in (("delete", "forget it"), ("enable", "tick again"), ("disable", "pause")):
        commands.add_parser(name, help=text).add_argument("id")


def start_body(args: argparse.Namespace) -> dict[str, Any]:
    """The ``POST .../jobs`` body of ``netdisco jobs start``."""
    on: Any = args.on[0] if len(args.on) == 1 and args.on[0] in ("any", "all") else args.on
    if len(args.on) == 1 and "=" in args.on[0]:
        on = args.on[0]
    body: dict[str, Any] = {"on": on, "on_lost": args.on_lost}
    if args.jobs_command == "run":
        body.update(command=args.job_command, argv=args.argv)
    else:
        body.update(spider=args.spider, args=parse_pairs(args.args))
    body["settings"] = parse_pairs(args.settings)
    if args.project != "-":
        body["project"] = args.project
    if args.project_version:
        body["version"] = args.project_version
    return body


def _headers(args: argparse.Namespace) -> dict[str, str]:
    token = os.environ.get(args.token_env)
    return {"Authorization": f"Bearer {token}"} if token else {}


def _refused(status: int, text: str) -> ControlRefused:
    """The monitor's error answer as one line: its JSON message, else the start of the body."""
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    error = data.get("error", {}) if isinstance(data, dict) else {}
    message = error.get("message") if isinstance(error, dict) else None
    said = str(message or " ".join(text.split())[:200] or "no reason given")
    code = str(error.get("code", "refused")) if isinstance(error, dict) else "refused"
    return ControlRefused(status, code, f"the monitor answered {status}: {said}")


async def _call(session: aiohttp.ClientSession, method: str, url: str, body: Any = None) -> Any:
    async with session.request(method, url, json=body) as resp:
        text = await resp.text()
        if resp.status >= 400:
            raise _refused(resp.status, text)
    try:
        return json.loads(text)
    except ValueError:
        raise _refused(resp.status, f"not JSON: {text}") from None


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
    return _columns(rows)


def _columns(rows: Sequence[tuple[str, ...]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows)


async def _log(session: aiohttp.ClientSession, url: str, args: argparse.Namespace) -> None:
    params = {"tail": str(args.tail), "follow": "1" if args.follow else "0"}
    async with session.get(url + "/log", params=params) as resp:
        if resp.status >= 400:
            raise _refused(resp.status, await resp.text())
        async for chunk in resp.content.iter_any():
            sys.stdout.buffer.write(chunk)
            sys.stdout.flush()


async def _data(session: aiohttp.ClientSession, args: argparse.Namespace) -> None:
    """``jobs spiders`` as a table; ``jobs items`` as the monitor sends them, streamed."""
    monitor = args.monitor.rstrip("/") + "/netdiscovery/monitor"
    if args.jobs_command == "spiders":
        query = f"?version={quote(args.project_version)}" if args.project_version else ""
        data = await _call(
            session, "GET", f"{monitor}/projects/{quote(args.project)}/spiders{query}"
        )
        rows = [("NAME", "SPIDER")] + [(r["name"], r["spider"]) for r in data["spiders"]]
        commands = data.get("commands") or []
        rows += [(r["name"], "command: " + shlex.join(r["argv"])) for r in commands]
        print(_columns(rows))
        return
    params = {"format": args.format, "offset": str(args.offset)}
    if args.limit is not None:
        params["limit"] = str(args.limit)
    async with session.get(f"{monitor}/jobs/{args.id}/items", params=params) as resp:
        if resp.status >= 400:
            raise ConfigError("monitor", f"{resp.status} {(await resp.text())[:500]}")
        async for chunk in resp.content.iter_any():
            sys.stdout.buffer.write(chunk)
    sys.stdout.flush()


def _schedule_table(schedules: list[dict[str, Any]]) -> str:
    rows = [("ID", "ENABLED", "WHEN", "SPIDER", "NEXT", "FIRED", "SKIPPED", "LAST JOB")]
    for item in schedules:
        when = item["cron"] if item.get("cron") else f"every {item['every']:g}s"
        upcoming = item.get("next_run")
        rows.append(
            (
                item["id"],
                "yes" if item["enabled"] else "no",
                when,
                str(item["request"].get("spider")),
                time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(upcoming)) if upcoming else "-",
                str(item["fired"]),
                str(item["skipped"]),
                item.get("last_job") or "-",
            )
        )
    return _columns(rows)


async def _schedule(session: aiohttp.ClientSession, args: argparse.Namespace) -> None:
    base = args.monitor.rstrip("/") + "/netdiscovery/monitor/schedules"
    command = args.schedule_command
    if command == "add":
        body = start_body(args)
        body["cron" if args.cron else "every"] = args.cron or args.every
        body["enabled"] = not args.disabled
        print((await _call(session, "POST", base, body))["id"])
    elif command == "list":
        print(_schedule_table((await _call(session, "GET", base))["schedules"]))
    elif command == "delete":
        print((await _call(session, "DELETE", f"{base}/{args.id}"))["deleted"], "deleted")
    else:
        body = {"enabled": command == "enable"}
        done = await _call(session, "PATCH", f"{base}/{args.id}", body)
        print(done["id"], "enabled" if done["enabled"] else "disabled")


async def run_jobs(args: argparse.Namespace) -> int:
    """Do one ``netdisco jobs`` sub-command: 0; 1 with one line on stderr when the monitor
    cannot be reached or refuses (bad usage is 2, as for every ``netdisco`` command)."""
    try:
        return await _run(args)
    except ControlRefused as exc:
        reason = str(exc)
    except (aiohttp.ClientError, OSError, TimeoutError) as exc:
        reason = f"cannot reach the monitor at {args.monitor}: {_plain(exc)}"
    print(f"netdisco jobs: error: {reason}", file=sys.stderr)
    return 1


def _plain(exc: BaseException) -> str:
    """An exception as one line: its words, else its class name."""
    return " ".join(str(exc).split()) or type(exc).__name__


async def _run(args: argparse.Namespace) -> int:
    if not args.monitor.startswith(("http://", "https://")):
        raise ConfigError("--monitor", f"expected http://HOST:PORT, got {args.monitor!r}")
    base = args.monitor.rstrip("/") + "/netdiscovery/monitor/jobs"
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=10)
    async with aiohttp.ClientSession(headers=_headers(args), timeout=timeout) as session:
        command = args.jobs_command
        if command == "log":
            await _log(session, f"{base}/{args.id}", args)
            return 0
        if command in ("spiders", "items"):
            await _data(session, args)
            return 0
        if command == "schedule":
            await _schedule(session, args)
        elif command in ("start", "run"):
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
