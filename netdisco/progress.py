"""The live progress display of ``netdisco crawl`` and ``netdisco engine`` on a terminal.

It only renders: every number is a spider's ``Stats`` (under ``-j N`` the workers'
counters the crawl's process adds up, as its summary does), read on the event loop
``FRAMES`` times a second at most, and drawn in place by rich's ``Live``. While it is
live, rich holds ``sys.stderr``, and log lines (``netdisco.logs`` writes to the
stderr of the moment) are printed above it, never through it. It is off when stderr
is not a terminal, with ``--log-json`` or ``--no-progress``: then the ``progress``
log lines come every ``progress_interval`` as before. Spider names, hosts and errors
come from spiders and servers: they are shown as plain text (no markup), without
control characters, cut to a width (an error is shown whole, up to ``ERROR_WIDTH``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.table import Table
from rich.text import Text

from netdisco.crawl.stats import Stats
from netdisco.crawl.summary import Outcome

if TYPE_CHECKING:
    from netdisco.engine import SpiderEngine

#: frames per second, at most
FRAMES = 4
#: spider rows and host rows shown; the rest is counted in one line
MAX_SPIDERS = 20
MAX_HOSTS = 5
#: the longest name or host shown (characters)
WIDTH = 60
#: the longest error shown: whole in practice (rich wraps it), bounded against a hostile one
ERROR_WIDTH = 1000

SPIDER_COLUMNS = ("spider", "state", "pages", "pages/s", "items", "queue", "in flight",
                  "errors", "elapsed")  # fmt: skip
HOST_COLUMNS = ("busiest hosts", "spider", "in flight", "waiting")


@dataclass(frozen=True)
class Row:
    """One spider as the display shows it: its name, its state and its counters."""

    name: str
    state: str
    stats: Stats


def add_option(parser: argparse.ArgumentParser) -> None:
    """``--no-progress``, as ``crawl`` and ``engine`` take it."""
    parser.add_argument(
        "--no-progress",
        action="store_true",
        help="no live display on a terminal (progress log lines instead)",
    )


def wanted(args: argparse.Namespace) -> bool:
    """Whether to show the display: stderr is a terminal that can move its cursor, and
    neither ``--no-progress`` nor JSON log lines were asked for."""
    if args.no_progress or args.log_json_effective:
        return False
    return sys.stderr.isatty() and os.environ.get("TERM", "") not in ("dumb", "unknown")


def _text(value: object, width: int = WIDTH) -> Text:
    """A cell of plain text: markup is not read, control characters are dropped (rich's
    ``Text``), and it is cut to ``width``."""
    text = str(value)
    return Text(text if len(text) <= width else text[: width - 1] + "…")


def _spider_cells(row: Row) -> list[Text]:
    s = row.stats
    elapsed = max(0.0, time.monotonic() - s.started)
    figures = (s.succeeded, f"{s.pages.per_second(5):.1f}", s.items, s.queue_size,
               s.in_flight, sum(s.error_kinds.values()), f"{elapsed:.0f} s")  # fmt: skip
    return [_text(row.name), _text(row.state), *(Text(str(f), justify="right") for f in figures)]


def _host_rows(rows: Sequence[Row]) -> list[tuple[str, str, int, int]]:
    """The busiest hosts over every spider: ``(host, spider, in flight, waiting)``."""
    hosts = [(host, row.name, flying, parked) for row in rows
             for host, flying, parked in row.stats.busiest(MAX_HOSTS)]  # fmt: skip
    hosts.sort(key=lambda h: (-h[2] - h[3], h[0], h[1]))
    return hosts[:MAX_HOSTS]


def frame(title: str, rows: Sequence[Row]) -> RenderableType:
    """One picture of the spiders: a table of their counters, the busiest hosts (in
    flight, and set aside waiting for their turn), the latest error."""
    spiders = Table(*SPIDER_COLUMNS, title=_text(title, 3 * WIDTH), title_justify="left",
                    box=None, header_style="bold", pad_edge=False)  # fmt: skip
    for row in rows[:MAX_SPIDERS]:
        spiders.add_row(*_spider_cells(row))
    parts: list[RenderableType] = [spiders]
    if len(rows) > MAX_SPIDERS:
        parts.append(Text(f"… and {len(rows) - MAX_SPIDERS} more spiders"))
    hosts = _host_rows(rows)
    if hosts:
        table = Table(*HOST_COLUMNS, box=None, header_style="bold", pad_edge=False)
        for host, name, flying, parked in hosts:
            shown = host.rpartition("@")[2]  # never a URL's user name or password
            table.add_row(_text(shown), _text(name), Text(str(flying)), Text(str(parked)))
        parts.append(table)
    return Group(*parts, *_errors(rows))


def _errors(rows: Sequence[Row]) -> list[Text]:
    """The latest error of up to three spiders, each shown whole (wrapped, bounded by
    ``ERROR_WIDTH``) and once, however many spiders share it."""
    shown: dict[str, list[str]] = {}
    for row in rows[:MAX_SPIDERS]:
        if row.stats.last_error and (row.stats.last_error in shown or len(shown) < 3):
            shown.setdefault(row.stats.last_error, []).append(row.name)
    return [_text(f"last error ({', '.join(names)}): {error}", ERROR_WIDTH)
            for error, names in shown.items()]  # fmt: skip


class Display:
    """A ``Live`` on stderr that draws ``frame(title(), rows())`` ``FRAMES`` times a
    second from a task of its own (rendering happens on the loop, between callbacks:
    nothing else reads the counters from another thread). ``transient``: the display is
    wiped at the end (a summary follows), else its last picture stays."""

    def __init__(
        self,
        title: Callable[[], str],
        rows: Callable[[], Sequence[Row]],
        *,
        transient: bool,
    ) -> None:
        self.title, self.rows = title, rows
        self.live = Live(
            console=Console(file=sys.stderr),
            auto_refresh=False,
            transient=transient,
            redirect_stderr=True,
            redirect_stdout=sys.stdout.isatty(),  # items piped on stdout stay on stdout
        )
        self._task: asyncio.Task[None] | None = None

    def _draw(self) -> None:
        self.live.update(frame(self.title(), self.rows()), refresh=True)

    async def _redraw(self) -> None:
        while True:
            self._draw()
            await asyncio.sleep(1 / FRAMES)

    async def __aenter__(self) -> Display:
        self.live.start()
        self._task = asyncio.create_task(self._redraw(), name="progress")
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        assert self._task is not None
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        try:
            self._draw()  # the last figures, before it is wiped or stays
        finally:
            self.live.stop()


@contextlib.asynccontextmanager
async def shown(
    enabled: bool, title: Callable[[], str], rows: Callable[[], Sequence[Row]], *, transient: bool
) -> AsyncIterator[None]:
    """The display around the block when ``enabled``; nothing at all otherwise."""
    if not enabled:
        yield
        return
    async with Display(title, rows, transient=transient):
        yield


def crawl_display(
    crawl: Outcome, enabled: bool, detail: Callable[[], str] | None = None
) -> contextlib.AbstractAsyncContextManager[None]:
    """``netdisco crawl``'s display: one row, wiped at the end for the closing summary;
    ``detail`` adds to the title (``-j N``: the workers running)."""

    def title() -> str:
        return f"netdisco crawl {crawl.name}" + (f" ({detail()})" if detail else "")

    def rows() -> list[Row]:
        return [Row(crawl.name, crawl.state.value, crawl.stats)]

    return shown(enabled, title, rows, transient=True)


def engine_display(
    engine: SpiderEngine, enabled: bool
) -> contextlib.AbstractAsyncContextManager[None]:
    """``netdisco engine``'s display: one row per spider; the last picture stays."""

    def title() -> str:
        return f"engine {engine.id}  {engine.status_url}  zookeeper: {engine.registry_said}"

    def rows() -> list[Row]:
        return [Row(c.name, c.state.value, c.stats) for c in engine.crawlers()]

    return shown(enabled, title, rows, transient=False)
