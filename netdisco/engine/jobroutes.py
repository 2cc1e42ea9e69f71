"""The engine's job routes: a job's log (tail, follow) and its items: the ones it kept,
in pages or as a download (JSON lines, CSV), or a JSON-lines feed it declared, in pages.

All need the control token (a log or an item can say more than a counter), and
all read only inside the job's own directory under ``jobs_dir`` or, for a feed, a
feed file the job's child reported that lies under ``feeds_dir``: a path from the
request never names a file.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from aiohttp import web

from netdisco.engine.jobitems import csv_rows, items_path, jsonl, page
from netdisco.engine.joblog import MAX_LINE, MAX_TAIL, follow, job_dir, tail
from netdisco.engine.replies import json_response
from netdisco.exceptions import ApiError

if TYPE_CHECKING:
    from netdisco.engine.engine import SpiderEngine

#: the most items one page answers
MAX_ITEMS = 1000


def _query_int(request: web.Request, name: str, default: int, high: int) -> int:
    raw = request.query.get(name)
    if raw is None:
        return default
    if not raw.isdigit() or int(raw) > high:
        raise ApiError(400, "invalid_query", f"{name} must be a whole number 0-{high}")
    return int(raw)


def _directory(engine: SpiderEngine, job_id: str) -> Path:
    if engine.jobs is None:
        raise ApiError(404, "no_jobs", "this engine runs no jobs")
    try:
        directory = job_dir(engine.jobs.directory, job_id)
    except ValueError:
        raise ApiError(404, "unknown_job", f"{job_id!r} is not a job id") from None
    if not directory.is_dir():
        raise ApiError(404, "unknown_job", f"job {job_id} never ran on this engine")
    return directory


async def job_log(request: web.Request, engine: SpiderEngine) -> web.StreamResponse:
    """``GET /netdiscovery/jobs/{id}/log?tail=N&follow=1``: the last N lines, then (follow)
    every new one until the job ends, as a chunked text answer."""
    job_id = request.match_info["id"]
    path = _directory(engine, job_id) / "job.log"
    lines = _query_int(request, "tail", 100, MAX_TAIL)
    following = request.query.get("follow") in ("1", "true")
    head, offset = tail(path, lines)
    response = web.StreamResponse(headers={"Content-Type": "text/plain; charset=utf-8"})
    response.enable_chunked_encoding()
    await response.prepare(request)
    await response.write(head)
    if following:
        runner = engine.jobs

        def done() -> bool:
            return runner is None or not runner.active(job_id)

        async for chunk in follow(path, offset, done):
            await response.write(chunk)
    await response.write_eof()
    return response


def _feed(engine: SpiderEngine, job_id: str, index: int) -> Path:
    """The JSON-lines feed ``index`` the job reported, checked to lie under ``feeds_dir``."""
    feeds = engine.jobs.feeds(job_id) if engine.jobs is not None else []
    if index >= len(feeds):
        raise ApiError(404, "unknown_feed", f"job {job_id} has no feed {index}")
    root = engine.settings.feeds_dir
    path = Path(feeds[index]).resolve()
    if root is None or not path.is_relative_to(Path(root).resolve()):
        raise ApiError(404, "unknown_feed", "the feed is not under this engine's feeds_dir")
    if path.suffix not in (".jsonl", ".jl", ".ndjson"):
        raise ApiError(400, "not_json_lines", "only JSON-lines feeds are read in pages")
    return path


async def job_items(request: web.Request, engine: SpiderEngine) -> web.StreamResponse:
    """``GET /netdiscovery/jobs/{id}/items?offset=&limit=``: a page of the kept items with
    their count; ``&format=jsonl|csv``: them all (or ``offset``/``limit``) as a download;
    ``?feed=N``: a page of the job's JSON-lines feed N instead."""
    job_id = request.match_info["id"]
    directory = _directory(engine, job_id)
    if "feed" in request.query:
        return _feed_page(request, engine, job_id)
    path = items_path(directory)
    if path is None:
        raise ApiError(404, "no_items", f"job {job_id} kept no items file")
    offset = _query_int(request, "offset", 0, 10**9)
    form = request.query.get("format")
    if form is None:
        limit = _query_int(request, "limit", 100, MAX_ITEMS)
        assert engine.jobs is not None
        counts = engine.jobs.kept(job_id)
        items = page(path, offset, limit + 1)  # one more: whether the file holds more
        # the child's count is its last status line's (every 0.5 s): never fewer than read
        seen = offset + len(items)
        counts["items_kept"] = max(counts["items_kept"], seen)
        body = {"job": job_id, "offset": offset, "limit": limit, **counts}
        return json_response({**body, "items": items[:limit]})
    if form not in DOWNLOADS:
        raise ApiError(400, "invalid_query", "format must be jsonl or csv")
    most = _query_int(request, "limit", 0, 10**9) if "limit" in request.query else None
    return await _download(request, path, job_id, form, (offset, most))


#: download format -> (content type, the lines of the kept items it writes)
DOWNLOADS = {
    "jsonl": ("application/x-ndjson", jsonl),
    "csv": ("text/csv; charset=utf-8", csv_rows),
}


async def _download(
    request: web.Request, path: Path, job_id: str, form: str, span: tuple[int, int | None]
) -> web.StreamResponse:
    kind, lines = DOWNLOADS[form]
    headers = {
        "Content-Type": kind,
        "Content-Disposition": f'attachment; filename="job-{job_id}.{form}"',
    }
    response = web.StreamResponse(headers=headers)
    response.enable_chunked_encoding()
    await response.prepare(request)
    async for chunk in lines(path, *span):
        await response.write(chunk)
    await response.write_eof()
    return response


def _feed_page(request: web.Request, engine: SpiderEngine, job_id: str) -> web.Response:
    """A page of a JSON-lines feed the job declared, lines as written."""
    path = _feed(engine, job_id, _query_int(request, "feed", 0, 99))
    offset = _query_int(request, "offset", 0, 10**9)
    limit = _query_int(request, "limit", 100, MAX_ITEMS)
    items: list[str] = []
    with path.open("rb") as f:
        for number, line in enumerate(f):
            if number >= offset + limit:
                break
            if number >= offset and len(line) <= MAX_LINE:
                items.append(line.decode("utf-8", "replace").rstrip("\n"))
    body = {"job": job_id, "feed": str(path), "offset": offset, "items": items}
    return json_response(body)
