"""The engine's status as a page for a browser: ``GET /netdiscovery/engine`` asked with
``Accept: text/html`` (JSON stays the answer for every client that does not prefer
HTML), and ``/`` redirects there.

Everything shown comes from ``engine_body`` (what the JSON says), escaped; times are
written in UTC with how long ago, sizes in MiB/GiB. No script, no outside resource.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from html import escape
from typing import Any

#: a spider's keys shown, and the words their columns are headed by
_SPIDER_COLUMNS = {"name": "spider", "state": "state", "succeeded": "pages", "items": "items",
                   "failed": "failed", "queue_size": "queued", "started_at": "started"}  # fmt: skip
#: a job's keys shown (``JobRunner.recent``), and their columns' words
_JOB_COLUMNS = {"job": "job", "state": "state", "spider": "spider", "succeeded": "pages",
                "items": "items", "failed": "failed", "at": "last change"}  # fmt: skip
#: no /favicon.ico request (a 404 on every load): the page names an empty icon itself
_NO_ICON = '<link rel=icon href="data:,">'


def _quality(accept: str, wanted: str) -> float:
    """The q-value ``accept`` gives ``wanted`` (exact, then ``type/*``, then ``*/*``)."""
    found: dict[str, float] = {}
    for part in accept.split(",")[:50]:
        media, *params = (p.strip() for p in part.split(";"))
        q = 1.0
        for param in params:
            key, _, value = param.partition("=")
            if key.strip() == "q":
                try:
                    q = min(max(float(value), 0.0), 1.0)
                except ValueError:
                    q = 0.0
        found[media.lower()] = q
    for key in (wanted, wanted.split("/")[0] + "/*", "*/*"):
        if key in found:
            return found[key]
    return 0.0


def wants_html(accept: str) -> bool:
    """Whether the client prefers HTML to JSON (a browser does; curl's ``*/*`` does not)."""
    return _quality(accept, "text/html") > _quality(accept, "application/json")


def when(seconds: Any, now: float | None = None) -> str:
    """Unix seconds as ``2026-12-02 01:10:00 UTC (5 min ago)``; ``-`` when unknown."""
    if not isinstance(seconds, int | float) or isinstance(seconds, bool):
        return "-"
    stamp = datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    ago = (time.time() if now is None else now) - seconds
    return f"{stamp} ({_duration(ago)} ago)" if ago >= 0 else f"{stamp} (in {_duration(-ago)})"


def _duration(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f} {unit}"
    return f"{seconds:.0f} s"


def _bytes(value: Any) -> str:
    if not isinstance(value, int):
        return "-"
    return f"{value / 2**30:.1f} GiB" if value >= 2**30 else f"{value / 2**20:.1f} MiB"


def _rows(pairs: list[tuple[str, Any]]) -> str:
    return "".join(f"<tr><th>{escape(k)}</th><td>{escape(str(v))}</td></tr>" for k, v in pairs)


def _facts(facts: dict[str, Any]) -> list[tuple[str, Any]]:
    disks = facts.get("disk_free") or {}
    return [
        ("CPU", f"{facts.get('cpu_percent', '-')} %"),
        ("load (1 min)", facts.get("load1", "-")),
        ("memory available", f"{_bytes(facts.get('memory_available'))} of "
         f"{_bytes(facts.get('memory_total'))}"),
        ("RSS", _bytes(facts.get("rss"))),
        ("open files", facts.get("open_fds", "-")),
        *((f"disk free ({name})", _bytes(free)) for name, free in disks.items()),
        ("versions", f"netdisco {facts.get('netdisco', '-')}, Python {facts.get('python', '-')}"),
    ]  # fmt: skip


def _table(entries: list[dict[str, Any]], columns: dict[str, str], none: str) -> str:
    """One row per entry, headed by the columns' words; times as ``when`` says them."""
    head = "".join(f"<th>{escape(word)}</th>" for word in columns.values())
    rows = []
    for entry in entries:
        cells = [
            when(entry.get(key)) if key in ("started_at", "at") else str(entry.get(key, "-"))
            for key in columns
        ]
        rows.append("<tr>" + "".join(f"<td>{escape(cell)}</td>" for cell in cells) + "</tr>")
    empty = f"<tr><td colspan={len(columns)}>{escape(none)}</td></tr>"
    return f"<table><tr>{head}</tr>{''.join(rows) or empty}</table>"


def _jobs(body: dict[str, Any]) -> str:
    """The jobs the engine ran (``jobs_ran``: running, then ended, newest first)."""
    if "jobs_ran" not in body:
        return ""  # an engine that runs no jobs
    ran = list(body["jobs_ran"] or [])
    return f"<h2>Jobs</h2>{_table(ran, _JOB_COLUMNS, 'none yet')}"


def render(body: dict[str, Any]) -> str:
    """The page for one ``engine_body``."""
    registry = body.get("registry") or {}
    loop = "stalled" if body.get("stalled") else "running"
    identity = [
        ("engine", body.get("id")),
        ("state", body.get("state")),
        ("registry", registry.get("state", "standalone")),
        ("event loop", f"{loop}, lag {body.get('loop_lag', '-')} s"),
        ("started", when(body.get("started_at"))),
        ("host", f"{body.get('host')}:{body.get('port')} (pid {body.get('pid')})"),
    ]
    title = escape(f"netdisco engine {body.get('id')}")
    return (
        f"<!doctype html><html lang=en><head><meta charset=utf-8>{_NO_ICON}<title>{title}</title>"
        "<style>body{font:14px sans-serif;margin:2em}table{border-collapse:collapse;"
        "margin-bottom:1.5em}td,th{border:1px solid #ccc;padding:4px 8px;text-align:left}"
        "</style></head><body>"
        f"<h1>{title}</h1><table>{_rows(identity)}</table>"
        f"<h2>Spiders</h2>{_table(list(body.get('spiders') or []), _SPIDER_COLUMNS, 'none')}"
        f"{_jobs(body)}"
        f"<h2>Node</h2><table>{_rows(_facts(dict(body.get('facts') or {})))}</table>"
        "<p>JSON: ask with <code>Accept: application/json</code>.</p></body></html>"
    )
