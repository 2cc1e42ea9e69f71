"""One job's crawl, in a child process of its engine (``python -m netdisco.engine.jobchild SPEC``).

The engine writes the spec (the job, its directory, its own ``spider_modules``,
``feeds_dir`` and ``job_items_max``)
and starts this module in the job's environment, so a spider that crashes, leaks
or blocks takes down only this process. The body goes through the same checks as
``POST /netdiscovery/spiders`` (:func:`netdisco.engine.launch.from_body`: the
allow-list, the refused settings, feeds under ``feeds_dir``). Status goes to the
engine as one JSON object a line on stdout; logs go to stderr, which the engine
writes to the job's log file; the items are kept in the job's directory
(:mod:`netdisco.engine.jobitems`), feed or not. SIGTERM, or the engine's end (stdin closes; the
kernel's parent-death signal covers a SIGKILLed engine), stops the crawl
gracefully: items are flushed and leases handed back.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import json
import os
import signal
import sys
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import structlog

from netdisco import logs
from netdisco._tasks import Tasks
from netdisco.crawl.arguments import make_spider
from netdisco.crawl.crawler import Crawler, SpiderState
from netdisco.crawl.scrapyproject import ScrapyProject, open_project, split_settings
from netdisco.engine.config import EngineSettings
from netdisco.engine.jobitems import ITEMS_FILE, KeptItems
from netdisco.engine.launch import from_body, module_spiders
from netdisco.exceptions import NetdiscoError
from netdisco.projects.store import project_spider

log = structlog.get_logger(__name__)

#: exit status of a job whose request was refused before anything started
REFUSED = 2


def _die_with_parent() -> None:
    """Linux: SIGTERM this process when the engine dies, even by SIGKILL."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def _orphaned(parent: int) -> None:
    """Our engine is gone, and with it the pipes: what we write now goes nowhere (a
    write to a broken pipe would fail the graceful stop that hands the leases back)."""
    if os.getppid() != parent:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 1)
        os.dup2(null, 2)


def _emit(data: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(data, default=str, separators=(",", ":")) + "\n")
    sys.stdout.flush()


def scrapy_project(spec: dict[str, Any]) -> ScrapyProject | None:
    """A deployed Scrapy project's job (its engine starts it in the project's root, where
    scrapy.cfg is): opened as ``netdisco crawl NAME`` opens it, ``import scrapy`` mapped."""
    if spec["job"].get("project") is None or not Path("scrapy.cfg").is_file():
        return None
    return open_project(Path.cwd())


def job_settings(
    job: dict[str, Any], project: ScrapyProject | None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The job's settings as (the crawl's, checked as any job's; those only a Scrapy
    project's ``from_crawler`` reads, said once in the job's log)."""
    table: dict[str, Any] = dict(job.get("settings", {}))
    if project is None:
        return table, {}
    taken, extra = split_settings(table)
    if extra:
        why = "not netdisco settings: kept for from_crawler (crawler.settings), as Scrapy's -s"
        log.warning("job_settings_unused", names=sorted(extra), why=why)
    return taken, extra


def build(spec: dict[str, Any]) -> tuple[Crawler, KeptItems]:
    """The job's crawler, checked as ``POST /netdiscovery/spiders`` checks a body, and the
    pipeline that keeps its items in the job's directory. A Scrapy project's settings.py
    is under the spider's ``custom_settings``; the job's settings netdisco does not know
    are, as Scrapy's ``-s``, for its pipelines' ``from_crawler`` only."""
    job = spec["job"]
    engine = EngineSettings(
        spider_modules=tuple(spec.get("spider_modules", ())), feeds_dir=spec.get("feeds_dir")
    )
    project = scrapy_project(spec)
    table, extra = job_settings(job, project)
    body = {"spider": job["spider"], "settings": table, "args": job.get("args", {})}
    project_settings = project.crawl_settings() if project else None
    launch = from_body(body, engine, spec["engine_id"], project_settings)
    settings = launch.settings
    if spec.get("frontier"):
        settings = settings.replace(frontier=spec["frontier"])
    spider = make_spider(launch.spider(), launch.args)
    kept = KeptItems(Path(spec["directory"]) / ITEMS_FILE, int(spec.get("items_max", 0)))
    scrapy = {**project.settings, **spider.custom_settings, **extra} if project else None
    crawler = Crawler(
        spider,
        settings,
        owner=spec.get("owner"),
        engine=spec["engine_id"],
        pipelines=[kept],
        scrapy_settings=scrapy,
    )
    return crawler, kept


def resolve(spec: dict[str, Any]) -> str:
    """The job's ``module:Class``: as its engine resolved it (a project's), as asked, or
    the spider of ``spider_modules`` that has the ``name`` asked (a job of no project)."""
    spider = str(spec["job"].get("spider_class") or spec["job"]["spider"])
    if ":" in spider:
        return spider
    names = module_spiders(tuple(spec.get("spider_modules", ())))
    return project_spider(spider, names, "engine.spider_modules")


def report(crawler: Crawler, kept: KeptItems, ref: str, final: bool = False) -> dict[str, Any]:
    """The status line: the crawler's status, its spider class, its kept items, its feeds
    and their item counts."""
    feeds = [{"path": f.target, "items": f.written} for f in crawler.feeds if f.target]
    status = {**crawler.status(), **kept.counts(), "spider_class": ref}
    return {**status, "feeds": feeds, "final": final}


async def _watch_stdin(stop: asyncio.Event) -> None:
    """The engine holds our stdin: end of file means it is gone."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=1024)
    try:
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    except (OSError, ValueError):  # not a pipe (run by hand): only signals stop it
        return
    while await reader.read(1024):
        pass
    stop.set()


async def run(spec: dict[str, Any]) -> int:
    """Run the job's crawl to its end; 0 when it finished, 1 when it failed or was stopped."""
    try:
        spec["job"]["spider"] = resolve(spec)
        crawler, kept = build(spec)
    except NetdiscoError as exc:  # said in the job's log too, where `jobs log` reads
        log.error("job_refused", job=spec["job"]["id"], reason=str(exc))
        _emit({"state": "failed", "error": str(exc), "final": True})
        return REFUSED
    stop = asyncio.Event()
    parent = os.getppid()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    tasks = Tasks()
    tasks.spawn(_watch_stdin(stop))
    interval = float(spec.get("status_interval", 0.5))
    await crawler.start()
    log.info("job_running", job=spec["job"]["id"], spider=crawler.name, pid=os.getpid())
    waiting = tasks.spawn(crawler.wait())
    stopping = tasks.spawn(stop.wait())
    while not waiting.done():
        _emit(report(crawler, kept, spec["job"]["spider"]))
        await asyncio.wait({waiting, stopping}, timeout=interval, return_when="FIRST_COMPLETED")
        if stopping.done() and crawler.state in (SpiderState.RUNNING, SpiderState.PAUSED):
            _orphaned(parent)
            log.info("job_stopping")
            await crawler.stop()
    _emit(report(crawler, kept, spec["job"]["spider"], final=True))
    await tasks.cancel_all(timeout=0.1)
    return 0 if crawler.state is SpiderState.FINISHED else 1


def main(
    argv: list[str] | None = None,
    job: Callable[[dict[str, Any]], Coroutine[Any, Any, int]] = run,
) -> int:
    """Read the spec the engine wrote, run the crawl (or another ``job``: a command's,
    :mod:`netdisco.engine.jobcommand`), exit with its status."""
    _die_with_parent()
    args = sys.argv[1:] if argv is None else argv
    spec = json.loads(Path(args[0]).read_text("utf-8"))
    logs.configure(json=True, level=spec.get("log_level", "info"))
    code = asyncio.run(job(spec))
    sys.stdout.flush()
    return code


if __name__ == "__main__":
    sys.exit(main())
