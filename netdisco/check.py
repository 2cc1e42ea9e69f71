"""``netdisco check CONFIG``: will this engine configuration start and be seen?

It reads the TOML (and the ``NETDISCO_*`` variables) as ``netdisco engine`` does, then
checks, each within ``--timeout``: ZooKeeper with its ACLs, every Redis frontier of the
spiders (and ``job_frontier``), the HTTP port, the spider modules, and ``feeds_dir``.
One line per check; exit 1 naming each problem, 0 when all are ok, 2 on a file that
is not a valid configuration. ZooKeeper, the port and the directory are judged by
``netdisco.cluster.check``, the very code ``netdisco-monitor check CONFIG`` runs.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import sys
from functools import partial
from typing import Any

from netdisco.cluster import check as shared
from netdisco.cluster.check import Finding, ok, problem
from netdisco.crawl.loader import import_failure, load_spider
from netdisco.engine.config import EngineConfig, load_config
from netdisco.engine.hosted import zookeeper_settings
from netdisco.exceptions import NetdiscoError
from netdisco.frontiers import is_shared
from netdisco.frontiers.redis.options import RedisOptions, connect, redact


def add_parser(commands: Any, common: argparse.ArgumentParser) -> None:
    parser = commands.add_parser(
        "check",
        parents=[common],
        help="check an engine config before starting it: ZooKeeper, Redis, ports, spiders",
        description="Checks that ZooKeeper answers (with its ACLs and digest identity), that "
        "every Redis frontier answers, that the HTTP port is free, that the spider modules "
        "import and that feeds_dir is writable. One line per check; exit 0 when all are "
        "ok, 1 naming each problem, 2 when the file is not a valid configuration.",
    )
    parser.add_argument("config", help="the engine's TOML file")
    parser.add_argument("--host", help="bind address, as netdisco engine --host")
    parser.add_argument("--port", type=int, help="HTTP port, as netdisco engine --port")
    parser.add_argument(
        "--timeout", type=float, default=shared.TIMEOUT, help="seconds per check (3)"
    )
    parser.set_defaults(func=run)


async def run(args: argparse.Namespace) -> int:
    """Check the configuration; a ``ConfigError`` (exit 2) when it cannot be read."""
    config = load_config(args.config, overrides={"host": args.host, "port": args.port})
    findings = await shared.run(engine_checks(config, max(args.timeout, 0.1)))
    return shared.report(findings, sys.stdout)


def engine_checks(config: EngineConfig, timeout: float) -> list[shared.Check]:
    """What an engine needs, as checks to run together."""
    engine = config.engine
    classes, imports = _spider_imports(config)
    checks: list[shared.Check] = [shared.settled(imports)]
    if config.zookeeper is not None:
        settings = zookeeper_settings(config.zookeeper)
        checks.append(partial(shared.zookeeper, settings, prefix="zookeeper", timeout=timeout))
        checks.append(shared.settled([shared.trust(settings, engine.token, prefix="zookeeper")]))
    checks += [partial(_redis, url, timeout) for url in _frontiers(config, classes)]
    if engine.http:
        checks.append(partial(shared.port_free, "engine port", engine.host, engine.port))
    if engine.feeds_dir:
        checks.append(shared.settled(shared.writable_dir("feeds_dir", engine.feeds_dir)))
    return checks


def _spider_imports(config: EngineConfig) -> tuple[dict[str, Any], list[Finding]]:
    """Every ``[[spiders]]`` class and ``spider_modules`` module imported, as the engine
    would; the classes found, by reference."""
    classes: dict[str, Any] = {}
    findings = []
    for entry in config.spiders:
        try:
            classes[entry.spider] = load_spider(entry.spider)
        except NetdiscoError as exc:
            findings.append(problem(f"{entry.key}.spider", str(exc)))
        else:
            findings.append(ok(f"{entry.key}.spider", f"{entry.spider} imports"))
    for name in config.engine.spider_modules:
        try:
            importlib.import_module(name)
        except Exception as exc:  # the module's own error, whatever it is, named
            failure = import_failure(exc)
            findings.append(problem(f"spider_modules {name}", f"does not import: {failure}"))
        else:
            findings.append(ok(f"spider_modules {name}", "imports"))
    return classes, findings


def _frontiers(config: EngineConfig, classes: dict[str, Any]) -> list[str]:
    """The shared (Redis) frontiers the spiders and jobs will use, each once."""
    urls = [config.engine.job_frontier or ""]
    for entry in config.spiders:
        cls = classes.get(entry.spider)
        if cls is not None:
            urls.append(entry.settings(dict(cls.custom_settings)).frontier)
    return list(dict.fromkeys(url for url in urls if is_shared(url)))


async def _redis(url: str, timeout: float) -> list[Finding]:
    """The server behind a frontier URL answers PING within ``timeout``."""
    what = f"redis {redact(url)}"
    try:
        options = RedisOptions.from_url(url)
        client = connect(options.url, socket_connect_timeout=timeout, socket_timeout=timeout)
    except (NetdiscoError, ValueError) as exc:
        return [problem(what, str(exc))]
    try:
        async with asyncio.timeout(timeout):
            await client.ping()
    except Exception as exc:  # redis-py's errors, OSError, the timeout: all say "unreachable"
        said = str(exc) or type(exc).__name__
        return [problem(what, f"unreachable: {said}")]
    finally:
        await client.aclose()
    return [ok(what, "answers")]
