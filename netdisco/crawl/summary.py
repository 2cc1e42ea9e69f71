"""The closing summary of a crawl: what was fetched, where the items went, what failed.

``summary`` gathers it as one mapping (``netdisco crawl --log-json`` logs it as one JSON
object); ``render`` writes the same as a few lines for a terminal, in the words a Scrapy
user expects ("Stored jsonl feed (526 items) in items.jsonl"). Pages per second are over
the whole run, not the progress line's last minute.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from netdisco.crawl.feeds.pipeline import FeedPipeline
from netdisco.crawl.lifecycle import SpiderState
from netdisco.crawl.stats import Stats
from netdisco.exceptions import ConfigError

#: how many error kinds the summary names, most frequent first
TOP_ERRORS = 5


class Outcome(Protocol):
    """What a summary is made of: a ``Crawler``, or the crawl of ``-j N`` processes."""

    @property
    def name(self) -> str: ...
    @property
    def state(self) -> SpiderState: ...
    @property
    def stats(self) -> Stats: ...
    @property
    def feeds(self) -> Sequence[FeedPipeline]: ...
    @property
    def already_finished(self) -> str | None:
        """Set when the crawl had run to its end before: how to crawl it again."""


def exit_code(crawl: Outcome, signals: Sequence[int]) -> int:
    """128 + the signal that stopped the crawl (130: Ctrl-C); 1 when the spider failed,
    no page came to anything for want of an answer (a site that is down: no connection,
    timeouts, 5xx) or every callback raised, unless the crawl had finished before; 0
    otherwise, as Scrapy: a crawl whose pages were answered 404 (``-a tag=humor`` where
    there is none) ran, and found nothing."""
    if signals:
        return 128 + signals[0]
    if crawl.already_finished is not None:  # nothing to fetch is the expected outcome
        return 0
    s = crawl.stats
    if crawl.state is SpiderState.FAILED:
        return 1
    if s.succeeded + s.not_modified + s.age_skipped == 0 and s.failed > s.client_errors():
        return 1
    every_callback_raised = s.callback_errors >= s.succeeded and not s.items
    return 1 if s.callback_errors and every_callback_raised else 0


def summary(crawler: Outcome) -> dict[str, Any]:
    """The crawl's outcome as one mapping; see the module docstring."""
    s = crawler.stats
    elapsed = max(time.monotonic() - s.started, 1e-9)
    top = sorted(s.error_kinds.items(), key=lambda pair: (-pair[1], pair[0]))[:TOP_ERRORS]
    feeds = [
        {"format": feed.spec.format, "path": feed.target or "stdout", **feed.counts()}
        for feed in crawler.feeds
    ]
    return {
        "spider": crawler.name,
        "state": crawler.state.value,
        "pages": {
            "ok": s.succeeded,
            "failed": s.failed,
            "retried": s.retried,
            "filtered": s.filtered,
            "robots_blocked": s.robots_blocked,
            "not_modified": s.not_modified,
        },
        "items": s.items,
        "items_dropped": s.dropped_items,
        "items_discarded": s.items_discarded,
        "items_invalid": s.items_invalid,
        "invalid_fields": dict(s.invalid_fields),
        "feeds": feeds,
        "bytes": s.bytes,
        "seconds": round(elapsed, 3),
        "pages_per_second": round(s.succeeded / elapsed, 2),
        "queue_size": s.queue_size,
        "seen": s.seen,
        "errors": dict(top),
        "spider_errors": dict(s.spider_errors),
        "last_error": s.last_error,
        "already_finished": crawler.already_finished,
    }


#: ``--fail-on NAME=VALUE``: what each threshold measures in a summary, and whether a
#: crawl fails when the figure is above the value (True) or below it (False).
def _error_ratio(data: dict[str, Any]) -> float:
    pages = data["pages"]
    return float(pages["failed"]) / float(max(pages["ok"] + pages["failed"], 1))


THRESHOLDS: dict[str, tuple[Callable[[dict[str, Any]], float], bool]] = {
    "error_ratio": (_error_ratio, True),
    "errors": (lambda d: d["pages"]["failed"], True),
    "min_items": (lambda d: d["items"], False),
    "min_pages": (lambda d: d["pages"]["ok"], False),
}  # fmt: skip


def parse_threshold(pair: str) -> tuple[str, float]:
    """``NAME=VALUE`` of ``--fail-on``, checked: a known name, a finite number >= 0
    (a ratio at most 1)."""
    name, sep, text = pair.partition("=")
    if not sep or name not in THRESHOLDS:
        raise ConfigError("--fail-on", f"expected NAME=VALUE with NAME one of "
                          f"{', '.join(THRESHOLDS)}, got {pair!r}")  # fmt: skip
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value < float("inf") or (name == "error_ratio" and value > 1):
        raise ConfigError("--fail-on", f"{name}: expected a number >= 0, got {text!r}")
    return name, value


def broken_thresholds(data: dict[str, Any], thresholds: Mapping[str, float]) -> list[str]:
    """The ``--fail-on`` thresholds a summary breaks, each said as a reader would."""
    broken = []
    for name, limit in thresholds.items():
        measure, above = THRESHOLDS[name]
        figure = measure(data)
        if figure > limit if above else figure < limit:
            said = "above" if above else "below"
            broken.append(f"{name} {round(figure, 3):g} {said} {limit:g}")
    return broken


def render(data: dict[str, Any]) -> str:
    """``summary``'s mapping as a few readable lines (no line longer than it must be)."""
    if data.get("already_finished"):
        return "\n".join(_finished_before(data))
    pages = data["pages"]
    counted = ", ".join(f"{value} {name.replace('_', ' ')}" for name, value in pages.items()
                        if (value or name in ("ok", "failed")) and name != "filtered")  # fmt: skip
    lines = [
        f"Spider {data['spider']} {data['state']} in {data['seconds']:.1f} s",
        f"  pages    {counted}  ({data['pages_per_second']:.1f} pages/s)",
        *_skipped(pages.get("filtered", 0)),
        f"  items    {data['items']}" + _items_lost(data),
        f"  bytes    {_size(data['bytes'])}",
        f"  queue    {data['queue_size']} left, {data['seen']} seen",
    ]
    if data["errors"]:
        kinds = ", ".join(f"{kind} x{count}" for kind, count in data["errors"].items())
        lines.append(f"  errors   {kinds}")
    if data.get("spider_errors"):
        kinds = ", ".join(f"{kind} x{count}" for kind, count in data["spider_errors"].items())
        lines.append(f"  spider   callbacks raised {kinds}")
    if data.get("failed_checks"):
        lines.append(f"  fail-on  {'; '.join(data['failed_checks'])}")
    return "\n".join(lines + _stored(data))


def _skipped(filtered: int) -> list[str]:
    """``filtered`` said as what it is: links not fetched on purpose, not a failure
    (docs/crawling.md, "What the summary counts")."""
    if not filtered:
        return []
    return [f"  skipped  {filtered} links already seen or out of scope (as meant, not errors)"]


def _finished_before(data: dict[str, Any]) -> list[str]:
    """A crawl that had run to its end before: no pages claimed, how to crawl again."""
    return [
        f"Spider {data['spider']} had already finished: nothing fetched in {data['seconds']:.1f} s",
        f"  again    {data['already_finished']}",
        f"  queue    {data['queue_size']} left, {data['seen']} seen",
        *_stored(data),
    ]


def _stored(data: dict[str, Any]) -> list[str]:
    return [f"Stored {feed['format']} feed ({_held(feed)}) in {feed['path']}"
            for feed in data["feeds"]]  # fmt: skip


def _held(feed: Mapping[str, Any]) -> str:
    """What a feed holds: ``526 items``, or ``62 records, 31 responses`` for a WARC file."""
    counts = [(key, value) for key, value in feed.items() if key not in ("format", "path")]
    return ", ".join(f"{value} {key}" for key, value in counts)


def _items_lost(data: dict[str, Any]) -> str:
    parts = [f"{data[key]} {key.removeprefix('items_')}"
             for key in ("items_dropped", "items_discarded", "items_invalid")
             if data.get(key)]  # fmt: skip
    return f" ({', '.join(parts)})" if parts else ""


def _size(count: int) -> str:
    value = float(count)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{count} B"  # not reached
