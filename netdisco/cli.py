"""The ``netdisco`` command: ``crawl`` one spider standalone (``engine`` runs many)."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import signal
import sys
from collections.abc import Sequence
from typing import Any

import structlog

from netdisco import logs
from netdisco._version import __version__
from netdisco.crawl import settings as settings_module
from netdisco.crawl.crawler import Crawler, SpiderState
from netdisco.crawl.feeds import FeedSpec, cli_feed
from netdisco.crawl.loader import load_spider
from netdisco.crawl.settings import Settings
from netdisco.exceptions import NetdiscoError, StateDirError
from netdisco.values import read_toml

log = structlog.get_logger(__name__)


def crawl_settings(args: argparse.Namespace, custom: dict[str, Any]) -> Settings:
    """Defaults < spider.custom_settings < --config < NETDISCO_* < -s."""
    result = settings_module.from_mapping(custom)
    if args.config:
        result = settings_module.from_mapping(read_toml(args.config, key="--config"), base=result)
    result = settings_module.from_env(base=result)
    return settings_module.from_mapping(settings_module.parse_pairs(args.set), base=result)


def cli_feeds(args: argparse.Namespace) -> tuple[FeedSpec, ...]:
    """``-o URI[:FORMAT]`` appends, ``-O URI[:FORMAT]`` overwrites (``-`` = stdout)."""
    appended = [cli_feed(uri, overwrite=False) for uri in args.output]
    return (*appended, *(cli_feed(uri, overwrite=True) for uri in args.overwrite))


def install_signal_handlers(stop: Any) -> None:
    """First SIGINT/SIGTERM stops gracefully; a second one exits at once."""
    loop = asyncio.get_running_loop()
    received: list[int] = []
    stopping: set[asyncio.Future[Any]] = set()

    def handler(signum: int) -> None:
        received.append(signum)
        if len(received) > 1:
            log.warning("forced_exit", signal=signal.Signals(signum).name)
            os._exit(130)
        log.info("stopping", signal=signal.Signals(signum).name)
        task = asyncio.ensure_future(stop())
        stopping.add(task)
        task.add_done_callback(stopping.discard)

    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, handler, signum)


async def _crawl(args: argparse.Namespace) -> int:
    spider_class = load_spider(args.spider)
    settings = crawl_settings(args, dict(spider_class.custom_settings))
    feeds = cli_feeds(args)
    if feeds:
        settings = dataclasses.replace(settings, feeds=(*settings.feeds, *feeds))
    crawler = Crawler(spider_class(), settings)

    async def stop() -> None:
        if crawler.state in (SpiderState.RUNNING, SpiderState.PAUSED):
            await crawler.stop()

    install_signal_handlers(stop)
    await crawler.run()
    if isinstance(crawler.failure, StateDirError):  # bad input, as at start: exit 2
        print(f"netdisco: error: {crawler.failure}", file=sys.stderr)
        return 2
    return 1 if crawler.state is SpiderState.FAILED else 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="netdisco", description=__doc__)
    parser.add_argument("--version", action="version", version=f"netdisco {__version__}")
    parser.add_argument(
        "--log-json",
        action="store_true",
        default=None,
        help="JSON log lines (default when stderr is not a terminal)",
    )
    parser.add_argument(
        "--log-level", default="info", choices=["debug", "info", "warning", "error"]
    )
    commands = parser.add_subparsers(dest="command", required=True)
    _add_crawl_parser(commands)
    _add_engine_parser(commands)
    _add_demo_parser(commands)
    return parser


def _add_crawl_parser(commands: Any) -> None:
    crawl = commands.add_parser("crawl", help="run one spider standalone")
    crawl.add_argument("spider", help="FILE.py:Class or module:Class")
    crawl.add_argument(
        "-o",
        "--output",
        action="append",
        default=[],
        metavar="URI[:FORMAT]",
        help="append items to a feed: FILE.jsonl/.json/.csv, sqlite://PATH.db, - (stdout)",
    )
    crawl.add_argument(
        "-O",
        "--overwrite-output",
        dest="overwrite",
        action="append",
        default=[],
        metavar="URI[:FORMAT]",
        help="as -o, but overwrite the feed",
    )
    crawl.add_argument(
        "-s",
        "--set",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a setting, e.g. -s concurrency=64 (repeatable)",
    )
    crawl.add_argument("--config", help="TOML file of settings")
    crawl.set_defaults(func=_crawl)


def _add_engine_parser(commands: Any) -> None:
    engine = commands.add_parser("engine", help="run the spiders of a config file, with HTTP")
    engine.add_argument("--config", help="engine TOML file ([engine], [zookeeper], [[spiders]])")
    engine.add_argument("--id", help="engine id (default: host name and port)")
    engine.add_argument("--host", help="bind address of the HTTP endpoint")
    engine.add_argument("--port", type=int, help="HTTP port (default 8715)")
    engine.add_argument("--advertise", help="host written into status_url (default: --host)")
    engine.add_argument(
        "-s",
        "--set",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a crawl setting for every spider, e.g. -s concurrency=64 (repeatable)",
    )
    engine.set_defaults(func=_engine)


async def _engine(args: argparse.Namespace) -> int:
    """Serve until SIGINT/SIGTERM, then deregister, drain the spiders and exit 0."""
    from netdisco.engine import SpiderEngine
    from netdisco.engine.config import load_config, parse_config  # the crawl command needs neither

    overrides = {"id": args.id, "host": args.host, "port": args.port, "advertise": args.advertise}
    pairs = settings_module.parse_pairs(args.set)
    if args.config:
        config = load_config(args.config, overrides=overrides, pairs=pairs)
    else:
        config = parse_config({}, overrides=overrides, pairs=pairs)
    engine = SpiderEngine.from_config(config)
    stop_requested = asyncio.Event()

    async def stop() -> None:
        stop_requested.set()

    install_signal_handlers(stop)
    try:
        await engine.start()
    except OSError as exc:
        print(f"netdisco: error: {exc}", file=sys.stderr)
        return 2
    log.info("engine_ready", engine=engine.id, status_url=engine.status_url)
    await stop_requested.wait()
    await engine.stop()
    return 0


def _add_demo_parser(commands: Any) -> None:
    demo = commands.add_parser(
        "demo",
        help="a live three-engine cluster and its monitor on loopback (about 15 s)",
        description="Starts ZooKeeper, a demo website, an SMTP sink, the monitor and three "
        "engines on 127.0.0.1, stops one engine gracefully and kills another, and shows the "
        "monitor's events and alert e-mail. Ctrl-C at any moment stops everything it started.",
    )
    demo.add_argument("--out", default="out", help="items, logs and configs go here (out)")
    demo.add_argument(
        "--site", metavar="HOST:PORT", help="only serve the demo website (the compose stack)"
    )
    demo.set_defaults(func=_demo)


async def _demo(args: argparse.Namespace) -> int:
    """Start ZooKeeper, a site, an SMTP sink, three engines and the monitor; narrate; stop."""
    from netdisco.demo import run, serve_site  # the other commands need none of it

    return await (serve_site(args.site) if args.site else run(args))


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logs.configure(json=args.log_json, level=args.log_level)
    try:
        code: int = asyncio.run(args.func(args))
    except NetdiscoError as exc:
        print(f"netdisco: error: {exc}", file=sys.stderr)
        return 2
    return code


if __name__ == "__main__":
    sys.exit(main())
