"""The ``netdisco`` command: ``crawl`` one spider standalone (``engine`` runs many), ``parse``
one page with a spider, ``shell`` to try selectors on a page, ``new`` spider from a template,
``list`` a project's spiders, ``deploy`` a project, ``dev up`` a standing local cluster,
``check`` an engine's config."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import structlog

from netdisco import check, deploy, dev, listing, logs, progress
from netdisco._tasks import Tasks
from netdisco._version import __version__
from netdisco.crawl import settings as settings_module
from netdisco.crawl.arguments import check_args, make_spider
from netdisco.crawl.crawler import Crawler, SpiderState
from netdisco.crawl.feeds import FeedSpec, cli_feed
from netdisco.crawl.loader import load_spider
from netdisco.crawl.pipelines import json_line, to_jsonable
from netdisco.crawl.scrapylog import LEVELS, log_choice, without_log
from netdisco.crawl.scrapyproject import ScrapyProject, find_project, find_spider
from netdisco.crawl.settings import Settings
from netdisco.crawl.spider import Spider
from netdisco.crawl.summary import (
    Outcome,
    broken_thresholds,
    exit_code,
    parse_threshold,
    render,
    summary,
)
from netdisco.crawl.templates import TEMPLATES
from netdisco.crawl.templates import render as render_template
from netdisco.exceptions import ConfigError, NetdiscoError, SpiderLoadError, StateDirError
from netdisco.jobs_cli import add_jobs_parser
from netdisco.schema import Source
from netdisco.values import read_toml

log = structlog.get_logger(__name__)


def crawl_settings(
    args: argparse.Namespace, custom: dict[str, Any], project: dict[str, Any] | None = None
) -> Settings:
    """The crawl's settings from every source the command line names (their order:
    ``settings.PRIORITIES``): a Scrapy project's settings.py, the spider's
    ``custom_settings``, ``--config``, ``NETDISCO_*``, ``-s``; Scrapy's log settings are
    the log's (``apply_log_settings``)."""
    return settings_module.layered(
        project=Source(without_log(project), settings_module.PROJECT) if project else None,
        spider=Source(without_log(custom), settings_module.CUSTOM),
        file=Source(read_toml(args.config, key="--config")) if args.config else None,
        environment=settings_module.env_source(),
        command_line=Source(without_log(settings_module.parse_pairs(args.set))),
    )


def cli_feeds(args: argparse.Namespace) -> tuple[FeedSpec, ...]:
    """``-o URI[:FORMAT]`` appends, ``-O URI[:FORMAT]`` overwrites (``-`` = stdout)."""
    appended = [cli_feed(uri, overwrite=False) for uri in args.output]
    return (*appended, *(cli_feed(uri, overwrite=True) for uri in args.overwrite))


def install_signal_handlers(stop: Any) -> list[int]:
    """First SIGINT/SIGTERM stops gracefully; a second one exits at once. Returns the
    list the signals received are appended to."""
    loop = asyncio.get_running_loop()
    received: list[int] = []
    stopping = Tasks()  # the graceful stop, kept until it ends

    def handler(signum: int) -> None:
        received.append(signum)
        if len(received) > 1:
            log.warning("forced_exit", signal=signal.Signals(signum).name)
            os._exit(130)
        log.info("stopping", signal=signal.Signals(signum).name)
        stopping.spawn(stop(), name="stop")

    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, handler, signum)
    return received


def spider_and_settings(args: argparse.Namespace) -> tuple[Spider, Settings]:
    """The spider named by ``args.spider`` given its ``-a`` arguments, and its settings: a
    ``FILE.py:Class``/``module:Class``, or a spider's name in the Scrapy project around
    the current directory (its settings.py under the spider's ``custom_settings``)."""
    project = None if ":" in args.spider else find_project()
    spider_class = _spider_class(args.spider, project)
    given = check_args(settings_module.parse_pairs(args.arg), spider_class, key="-a {name}")
    spider = make_spider(spider_class, given)
    apply_log_settings(args, project.settings if project else {}, spider.custom_settings)
    from_project = project.crawl_settings() if project else None
    args.scrapy_settings = {**project.settings, **spider.custom_settings} if project else None
    return spider, crawl_settings(args, spider.custom_settings, from_project)


def apply_log_settings(
    args: argparse.Namespace, project: dict[str, Any], custom: dict[str, Any]
) -> None:
    """Configure the log anew from Scrapy's LOG_LEVEL, LOG_FILE and LOG_ENABLED in
    settings.py, ``custom_settings`` and ``-s``, unless the command line gave a level
    (``-L``, ``--nolog``, ``--log-level``). A ``-j`` worker's log is its parent's: it
    keeps the level it was started with, and its lines go through the parent."""
    if not hasattr(args, "log_given"):  # a worker (netdisco.procs)
        return
    layers = {settings_module.PROJECT: project, settings_module.CUSTOM: custom,
              "-s {key}": settings_module.parse_pairs(args.set)}  # fmt: skip
    level, file = log_choice(args.log_given, layers)
    if (level, file) != (args.log_level, None):
        args.log_level = level  # what -j N passes on to its workers
        args.log_json_effective = logs.configure(json=args.log_json, level=level, file=file)


def _spider_class(ref: str, project: ScrapyProject | None) -> type[Spider]:
    """The class ``ref`` names: by name in ``project``, or as a file's or a module's."""
    if project is not None:
        return find_spider(project, ref)
    if ":" not in ref and not ref.endswith(".py"):
        where = f"none in {Path.cwd()} or above"
        raise SpiderLoadError(
            f"{ref!r}: expected FILE.py:Class, module:Class, or the name of a spider beside "
            f"scrapy.cfg ({where})"
        )
    return load_spider(ref)


async def _crawl(args: argparse.Namespace) -> int:
    args.thresholds = dict(parse_threshold(pair) for pair in args.fail_on)
    if args.processes is not None:  # -j: over every other source of the setting
        args.set = [*args.set, f"processes={args.processes}"]
    spider, settings = spider_and_settings(args)
    feeds = cli_feeds(args)
    if feeds:
        settings = dataclasses.replace(settings, feeds=(*settings.feeds, *feeds))
    live = progress.wanted(args)
    if live:  # the display shows what the progress lines would say
        settings = dataclasses.replace(settings, progress_interval=0.0)
    if settings.processes > 1:
        return await _crawl_processes(args, spider.name, settings, live)
    crawler = Crawler(spider, settings, scrapy_settings=args.scrapy_settings)

    async def stop() -> None:
        if crawler.state in (SpiderState.RUNNING, SpiderState.PAUSED):
            await crawler.stop()

    signals = install_signal_handlers(stop)
    async with progress.crawl_display(crawler, live):
        await crawler.run()
    if isinstance(crawler.failure, StateDirError):  # bad input, as at start: exit 2
        print(f"netdisco: error: {crawler.failure}", file=sys.stderr)
        return 2
    return _report(args, crawler, signals)


async def _crawl_processes(
    args: argparse.Namespace, name: str, settings: Settings, live: bool
) -> int:
    """``-j N``: one crawl on N worker processes (``netdisco.procs``), one summary."""
    from netdisco.procs.parent import ProcessCrawl  # only -j N needs it

    crawl = ProcessCrawl(args, name, settings)
    signals = install_signal_handlers(crawl.stop)

    def workers() -> str:
        return f"{crawl.workers_running()} of {crawl.count} processes"

    async with progress.crawl_display(crawl, live, detail=workers):
        await crawl.run()
    return _report(args, crawl, signals)


def _report(args: argparse.Namespace, crawl: Outcome, signals: Sequence[int]) -> int:
    """Print the closing summary; the exit status."""
    report = summary(crawl)
    report["failed_checks"] = broken_thresholds(report, getattr(args, "thresholds", {}))
    code = exit_code(crawl, signals) or (1 if report["failed_checks"] else 0)
    # the command's answer, not a log line: shown at every --log-level
    text = json.dumps({"event": "crawl_summary", "exit_code": code, **report})
    print(text if args.log_json_effective else render(report), file=sys.stderr)
    return code


def _global_options(defaults: bool) -> argparse.ArgumentParser:
    """``--log-json`` and ``--log-level`` (Scrapy's ``-L``/``--loglevel`` and ``--nolog``
    too), before the subcommand or after it (a subcommand's copy has no defaults, so that
    it only overrides what was given)."""
    options = argparse.ArgumentParser(add_help=False)
    unset = argparse.SUPPRESS
    options.add_argument(
        "--log-json",
        action="store_true",
        default=None if defaults else unset,
        help="JSON log lines and summary (default when stderr is not a terminal)",
    )
    options.add_argument(
        "--log-level", "-L", "--loglevel", dest="log_level", type=str.lower,
        default=None if defaults else unset, choices=LEVELS, metavar="LEVEL",
        help="debug, info (default), warning, error or critical, in any case (Scrapy's "
        "-L WARNING); over a Scrapy project's LOG_LEVEL",
    )  # fmt: skip
    options.add_argument(
        "--nolog", dest="log_level", action="store_const", const="none",
        default=None if defaults else unset, help="log nothing (the summary is still printed)",
    )  # fmt: skip
    return options


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="netdisco", description=__doc__, parents=[_global_options(True)]
    )
    parser.add_argument("--version", action="version", version=f"netdisco {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    after = _global_options(False)
    for add in (_add_crawl_parser, _add_parse_parser, _add_shell_parser, _add_new_parser,
                listing.add_parser, _add_engine_parser, check.add_parser, _add_demo_parser,
                dev.add_parser, deploy.add_parser):  # fmt: skip
        add(commands, after)
    add_jobs_parser(commands, after)
    return parser


def _add_crawl_parser(commands: Any, common: argparse.ArgumentParser) -> None:
    crawl = commands.add_parser(
        "crawl",
        help="run one spider standalone",
        parents=[common],
        description="Exit status: 0 when the crawl ran to its end, items or none (pages "
        "answered 404 included, as Scrapy); 1 when the spider failed, no page came to "
        "anything for want of an answer (a site that is down), every callback raised or a "
        "--fail-on threshold was crossed; 2 on bad usage or a spider that cannot be "
        "loaded; 128 + the signal that stopped it (130: Ctrl-C). docs/crawling.md.",
    )
    crawl.add_argument(
        "spider", help="FILE.py:Class, module:Class, or a spider's name beside scrapy.cfg"
    )
    crawl.add_argument(
        "--fail-on", action="append", default=[], metavar="NAME=VALUE",
        help="exit 1 past a threshold (repeatable): error_ratio=0.1 (failed pages over "
        "pages tried), errors=N (failed pages), min_items=N, min_pages=N",
    )  # fmt: skip
    crawl.add_argument(
        "-j",
        "--processes",
        metavar="N",
        help="crawl on N worker processes of this machine (auto: one per core); the "
        "processes setting",
    )
    _add_feed_options(crawl)
    _add_spider_options(crawl)
    progress.add_option(crawl)
    crawl.set_defaults(func=_crawl)


def _add_feed_options(crawl: argparse.ArgumentParser) -> None:
    """``-o``/``-O``: feeds named on the command line, added to the ``feeds`` setting."""
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


def _add_spider_options(command: argparse.ArgumentParser) -> None:
    """``-a`` and ``-s``, as ``crawl`` and ``parse`` take them."""
    command.add_argument(
        "-a",
        dest="arg",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a spider argument: a keyword of its __init__, or an attribute (repeatable)",
    )
    command.add_argument(
        "-s",
        "--set",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a setting, e.g. -s concurrency=64 (repeatable)",
    )
    command.add_argument("--config", help="TOML file of settings")


def _add_parse_parser(commands: Any, common: argparse.ArgumentParser) -> None:
    parse = commands.add_parser(
        "parse",
        help="run a spider's callback on one URL; print its items and requests",
        parents=[common],
        description="Fetches URL through the spider's downloader (settings, middleware, "
        "robots.txt), runs the callback and prints what it yields. Exit status 1 when a "
        "page could not be had or a callback raised.",
    )
    parse.add_argument("url")
    parse.add_argument("--spider", required=True, help="FILE.py:Class or module:Class")
    parse.add_argument("--callback", help="the method to call (default: parse)")
    parse.add_argument(
        "--depth", type=int, default=1, help="levels of links to follow and parse (1: none)"
    )
    parse.add_argument("--json", action="store_true", help="JSON lines on standard output")
    _add_spider_options(parse)
    parse.set_defaults(func=_parse)


async def _parse(args: argparse.Namespace) -> int:
    """Print what the callback yields on the page (and, with --depth, on its links)."""
    from netdisco.crawl.probe import parse_url  # only this command needs it

    if args.depth < 1:
        raise ConfigError("--depth", f"must be 1 or more, got {args.depth}")
    spider, settings = spider_and_settings(args)
    pages = await parse_url(spider, settings, args.url, callback=args.callback, depth=args.depth)
    for page in pages:
        print("\n".join(_page_lines(page, as_json=args.json)))
    return 1 if any(page.error for page in pages) else 0


def _page_lines(page: Any, *, as_json: bool) -> list[str]:
    """One page's items and requests: JSON lines, or lines for a reader."""
    if as_json:
        where = {"depth": page.depth, "page": page.url}
        lines = [{"kind": "item", **where, "item": to_jsonable(i)} for i in page.items]
        for request in page.requests:
            name = getattr(request.callback, "__name__", None)
            lines.append({"kind": "request", **where, "url": request.url, "callback": name})
        if page.error:
            lines.append({"kind": "error", **where, "error": page.error})
        return [json.dumps(line, default=str, ensure_ascii=False) for line in lines]
    head = f"# depth {page.depth}: {page.status or '---'} {page.url} ({page.callback})"
    text = [head, *(f"item     {json_line(item).rstrip()}" for item in page.items)]
    text += [f"request  {r.url} -> {getattr(r.callback, '__name__', 'parse')}"
             for r in page.requests]  # fmt: skip
    return text + ([f"error    {page.error}"] if page.error else [])


def _add_shell_parser(commands: Any, common: argparse.ArgumentParser) -> None:
    shell = commands.add_parser(
        "shell",
        help="an interactive console with a fetched page, to try selectors on",
        parents=[common],
        description="Fetches URL (if given) through the spider's downloader (settings, "
        "middleware, robots.txt) and opens a console (IPython when installed) with "
        "response, request, fetch(url), view(response), spider and settings.",
    )
    shell.add_argument("url", nargs="?", help="the page to fetch first")
    shell.add_argument(
        "--spider", default="netdisco:Spider", help="FILE.py:Class or module:Class whose "
        "settings and middleware apply (default: a plain Spider)",
    )  # fmt: skip
    shell.add_argument("--plain", action="store_true", help="Python's console, not IPython")
    _add_spider_options(shell)
    shell.set_defaults(func=_shell)


async def _shell(args: argparse.Namespace) -> int:
    """Open the console; the fetches run on a loop of their own (netdisco.crawl.shell)."""
    from netdisco.crawl.shell import Shell, interact  # only this command needs it

    spider, settings = spider_and_settings(args)

    def session() -> None:
        with Shell(spider, settings) as shell:
            if args.url:
                shell.fetch(args.url)
            interact(shell, plain=args.plain)

    await asyncio.to_thread(session)
    return 0


def _add_new_parser(commands: Any, common: argparse.ArgumentParser) -> None:
    new = commands.add_parser(
        "new",
        help="write a new spider file from a template",
        parents=[common],
        description="Writes NAME.py (refusing to overwrite one): a runnable spider that "
        "passes ruff and mypy --strict as written.",
    )
    new.add_argument("name", help="the spider's name (letters, digits, _)")
    new.add_argument("url", help="its start URL")
    new.add_argument("--template", choices=TEMPLATES, default="basic")
    new.add_argument("--dir", default=".", help="where to write it (.)")
    new.set_defaults(func=_new)


async def _new(args: argparse.Namespace) -> int:
    """Write the spider file; an existing one is never overwritten."""
    file, source = render_template(args.name, args.url, args.template)
    path = Path(args.dir) / file
    try:
        with path.open("x", encoding="utf-8") as handle:
            handle.write(source)
    except FileExistsError:
        raise ConfigError(str(path), "exists already; pick another name or --dir") from None
    cls = source.split("class ", 1)[1].split("(", 1)[0]
    print(f"Wrote {path}. Try it: netdisco crawl {path}:{cls} -o items.jsonl")
    return 0


def _add_engine_parser(commands: Any, common: argparse.ArgumentParser) -> None:
    engine = commands.add_parser(
        "engine", help="run the spiders of a config file, with HTTP", parents=[common]
    )
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
    progress.add_option(engine)
    engine.set_defaults(func=_engine)


async def _engine(args: argparse.Namespace) -> int:
    """Serve until SIGINT/SIGTERM, then deregister, drain the spiders and exit 0."""
    from netdisco.engine import SpiderEngine
    from netdisco.engine.config import load_config, parse_config  # the crawl command needs neither

    overrides = {"id": args.id, "host": args.host, "port": args.port, "advertise": args.advertise}
    pairs = settings_module.parse_pairs(args.set)
    live = progress.wanted(args)
    if live:  # the display shows what the progress lines would say
        pairs.setdefault("progress_interval", "0")
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
    async with progress.engine_display(engine, live):
        log.info("engine_ready", engine=engine.id, status_url=engine.status_url)
        await stop_requested.wait()
        await engine.stop()
    return 0


def _add_demo_parser(commands: Any, common: argparse.ArgumentParser) -> None:
    demo = commands.add_parser(
        "demo",
        parents=[common],
        help="a live three-engine cluster and its monitor on loopback (about 15 s)",
        description="Starts ZooKeeper, a demo website, an SMTP sink, the monitor and three "
        "engines on 127.0.0.1, stops one engine gracefully and kills another, and shows the "
        "monitor's events and alert e-mail. Ctrl-C at any moment stops everything it started.",
    )
    demo.add_argument("--out", default="out", help="items, logs and configs go here (out)")
    demo.add_argument(
        "--keep", action="store_true", help="after the story, keep the cluster running until Ctrl-C"
    )
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
    args.log_given = args.log_level  # None: a Scrapy project's LOG_LEVEL may set it
    args.log_level = args.log_level or "info"
    args.log_json_effective = logs.configure(json=args.log_json, level=args.log_level)
    try:
        code: int = asyncio.run(args.func(args))
    except NetdiscoError as exc:
        print(f"netdisco: error: {exc}", file=sys.stderr)
        return 2
    return code


if __name__ == "__main__":
    sys.exit(main())
