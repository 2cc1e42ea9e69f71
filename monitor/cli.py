"""``netdisco-monitor``: run the monitor, or probe a running one.

    netdisco-monitor --zk HOSTS [--root /netdiscovery] [--config monitor.toml] [--port 8316] ...
    netdisco-monitor check [--url URL | --config monitor.toml] [--timeout S]
    netdisco-monitor check monitor.toml [--timeout S]

``check`` exits 0 when the monitor's health route answers 200 without warnings
and 1 otherwise, for container health probes: a warning (a ZooKeeper root whose
ACL is open to the world although a digest is configured) fails it too.
``check CONFIG`` checks a configuration before a start instead, with the code of
``netdisco check`` (``netdisco.cluster.check``): ZooKeeper with its ACLs, the HTTP
port free, the state file's directory writable; 1 naming each problem.
Logging is configured here and only here: JSON lines when stderr is not a TTY
(or with ``--log-json``), readable otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import urllib.error
import urllib.request
from collections.abc import Sequence
from functools import partial
from pathlib import Path

from monitor import __version__
from monitor.config import load_config
from monitor.settings import MonitorConfig
from netdisco import logs
from netdisco.cluster import check as shared
from netdisco.exceptions import ConfigError
from netdisco.values import read_toml


def _run_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="netdisco-monitor",
        description="Watch netdisco engines in ZooKeeper; report joins, leaves and losses.",
        epilog="'netdisco-monitor check --help': the health probe.",
    )
    p.add_argument("--zk", metavar="HOSTS", help="ZooKeeper hosts (host:port,...[/chroot])")
    p.add_argument("--root", help="znode the engines register under (/netdiscovery)")
    p.add_argument("--config", type=Path, help="TOML file (see docs/configuration.md)")
    p.add_argument("--host", help="HTTP bind address (127.0.0.1)")
    p.add_argument("--port", type=int, help="HTTP port (8316; 0 picks a free one)")
    p.add_argument("--session-timeout", type=float, help="ZooKeeper session timeout, s")
    p.add_argument("--grace", type=float, help="seconds a lost engine waits before alerts")
    p.add_argument("--state-file", help="where the last view is kept across restarts")
    p.add_argument("--log-json", action="store_true", default=None, help="JSON log lines")
    p.add_argument("--log-level", help="debug, info, warning or error")
    p.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    return p


def _check_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="netdisco-monitor check",
        description="Exit 0 if a running monitor is healthy, 1 if not (container probe). "
        "With CONFIG: check that configuration before a start (ZooKeeper and its ACLs, the "
        "HTTP port, the state file's directory), one line per check, 1 naming each problem.",
    )
    p.add_argument("file", nargs="?", metavar="CONFIG", type=Path, help="check this TOML")
    p.add_argument("--url", help="monitor base URL (default from --config, or 127.0.0.1:8316)")
    p.add_argument("--config", type=Path, help="read [http] host and port from this TOML")
    p.add_argument("--timeout", type=float, default=3.0, help="seconds (3)")
    return p


def _load(args: argparse.Namespace) -> MonitorConfig:
    overrides = {
        "zookeeper.hosts": args.zk,
        "zookeeper.root": args.root,
        "zookeeper.session_timeout": args.session_timeout,
        "http.host": args.host,
        "http.port": args.port,
        "alerts.grace": args.grace,
        "alerts.state_file": args.state_file,
        "log.json": args.log_json,
        "log.level": args.log_level,
    }
    return load_config(args.config, overrides=overrides)


def run(argv: Sequence[str]) -> int:
    args = _run_parser().parse_args(argv)
    try:
        config = _load(args)
    except ConfigError as exc:
        print(f"netdisco-monitor: configuration error: {exc}", file=sys.stderr)
        return 2
    logs.configure(json=config.log.json, level=config.log.level)
    from monitor.daemon import Monitor  # after logging is configured

    try:
        monitor = Monitor(config)
    except ConfigError as exc:  # e.g. a callable hook that cannot be imported
        print(f"netdisco-monitor: configuration error: {exc}", file=sys.stderr)
        return 2
    try:
        monitor.run()
    except OSError as exc:  # e.g. the HTTP port is taken: say so, without a traceback
        print(f"netdisco-monitor: {exc}", file=sys.stderr)
        return 1
    return 0


def _check_url(args: argparse.Namespace) -> str:
    if args.url:
        return str(args.url).rstrip("/")
    http: dict[str, object] = {}
    if args.config is not None:
        http = read_toml(args.config, key="--config").get("http", {})
    # the same variables the daemon reads win over the file, as they do for the daemon
    host = os.environ.get("NETDISCO_MONITOR_HTTP_HOST", str(http.get("host", "127.0.0.1")))
    port = os.environ.get("NETDISCO_MONITOR_HTTP_PORT", str(http.get("port", 8316)))
    if host in ("0.0.0.0", "::"):
        host = "127.0.0.1"
    return f"http://{host}:{port}"


def preflight(path: Path, timeout: float) -> int:
    """``check CONFIG``: 0 when the monitor can start and be reached, 1 naming each problem
    (2: the file is not a valid configuration)."""
    try:
        config = load_config(path)
    except ConfigError as exc:
        print(f"netdisco-monitor: configuration error: {exc}", file=sys.stderr)
        return 2
    token = config.control.engine_token if config.control else None
    checks: list[shared.Check] = [
        shared.settled([shared.trust(config.zookeeper, token, prefix="zookeeper")]),
        partial(shared.zookeeper, config.zookeeper, prefix="zookeeper", timeout=timeout),
        partial(shared.port_free, "monitor port", config.http.host, config.http.port),
    ]
    state = config.alerts.state_file
    if state is not None:
        checks.append(shared.settled(shared.writable_dir("state_file directory", state.parent)))
    return shared.report(asyncio.run(shared.run(checks)), sys.stdout)


def check(argv: Sequence[str]) -> int:
    """Exit code 0 when healthy, 1 otherwise; one line on stdout saying why."""
    args = _check_parser().parse_args(argv)
    if args.file is not None:
        return preflight(args.file, max(args.timeout, 0.1))
    try:
        url = _check_url(args) + "/netdiscovery/health"
    except ConfigError as exc:
        print(f"unhealthy: configuration error: {exc}")
        return 1
    try:
        with urllib.request.urlopen(url, timeout=args.timeout) as resp:
            body = json.loads(resp.read())
        warnings = body.get("warnings") or []
        for warning in warnings:
            print(f"warning: {warning}")
        if not warnings:
            print(f"ok: {body.get('engines', '?')} engines online, {_monitors(body)}")
        return 1 if warnings else 0
    except urllib.error.HTTPError as exc:
        reason = json.loads(exc.read() or b"{}").get("reason", exc.reason)
        print(f"unhealthy ({exc.code}): {reason}")
    except (OSError, ValueError) as exc:
        print(f"unreachable: {url}: {exc}")
    return 1


def _monitors(health: dict[str, object]) -> str:
    """``3 monitors running (this one delivers the alerts)``, from the health route."""
    count = health.get("monitors", "?")
    role = "this one delivers" if health.get("delivering") else "another delivers"
    return f"{count} monitor{'' if count == 1 else 's'} running ({role} the alerts)"


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["check"]:
        return check(args[1:])
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
