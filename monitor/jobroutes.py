"""The monitor's job routes (docs/http-api.md): list, create, show, cancel, re-run, and a
job's log and items proxied from the engine it ran on.

Reading the list and one job is open like the rest of the monitor's GET routes;
everything else is control (:func:`monitor.control.check_caller`: the monitor's
token, or loopback without one), and the log and items are fetched only from the
engine's registered host and port, with the engine token (``Control.stream``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import aiohttp
from aiohttp import web

from monitor.control import Control, check_caller
from netdisco.cluster.jobs import is_job_id
from netdisco.exceptions import ConfigError, ControlRefused

if TYPE_CHECKING:
    from monitor.jobs import Jobs

JOBS: web.AppKey[Jobs] = web.AppKey("jobs")
CONTROL_KEY: web.AppKey[Control] = web.AppKey("jobs_control")
#: the largest job request body
MAX_BODY = 64 * 1024
#: the most bytes of items one page may bring back from the engine
MAX_ITEMS_ANSWER = 8 * 1024 * 1024
_QUERY = ("tail", "follow", "offset", "limit", "feed", "format")
#: what a download passes on from the engine's answer
_PASSED = ("Content-Type", "Content-Disposition")


def caller(request: web.Request) -> None:
    """Control only: the monitor's token, or loopback without one (the schedules' too)."""
    sockname = request.transport.get_extra_info("sockname") if request.transport else None
    check_caller(
        request.app[CONTROL_KEY].settings,
        request.headers,
        request.host,
        str(sockname[0]) if sockname else None,
    )


def _job_id(request: web.Request) -> str:
    job_id = request.match_info["id"]
    if not is_job_id(job_id):
        raise ControlRefused(404, "unknown_job", f"{job_id[:40]!r} is not a job id")
    return job_id


async def read_body(request: web.Request) -> Any:
    """A request's JSON body, read with a cap."""
    raw = await request.content.read(MAX_BODY + 1)
    if len(raw) > MAX_BODY:
        raise ControlRefused(413, "too_large", f"a request is at most {MAX_BODY} bytes")
    try:
        return json.loads(raw or b"null")
    except (ValueError, RecursionError):
        raise ControlRefused(400, "invalid_json", "the body is not JSON") from None


async def list_jobs(request: web.Request) -> web.Response:
    """``GET /netdiscovery/monitor/jobs``: every job, newest first."""
    keeper = request.app[JOBS]
    jobs = sorted(keeper.jobs.values(), key=lambda j: j.created_at, reverse=True)
    return web.json_response({"jobs": [keeper.live(j).to_dict() for j in jobs]})


async def create_job(request: web.Request) -> web.Response:
    """``POST /netdiscovery/monitor/jobs``: 201 with the job (several for ``on = "all"``)."""
    caller(request)
    try:
        made = await request.app[JOBS].create(await read_body(request))
    except ConfigError as exc:
        raise ControlRefused(400, "invalid_job", str(exc)) from None
    return web.json_response({"jobs": [j.to_dict() for j in made]}, status=201)


async def show_job(request: web.Request) -> web.Response:
    """``GET /netdiscovery/monitor/jobs/{id}``: the job as ZooKeeper holds it now, with
    its engine's live counters while it runs."""
    got = await request.app[JOBS].store.get(_job_id(request))
    if got is None:
        raise ControlRefused(404, "unknown_job", f"no job {request.match_info['id']!r}")
    return web.json_response(request.app[JOBS].live(got[0]).to_dict())


async def cancel_job(request: web.Request) -> web.Response:
    """``POST .../jobs/{id}/cancel``: 200 with the job (409 once it ended)."""
    caller(request)
    return web.json_response((await request.app[JOBS].cancel(_job_id(request))).to_dict())


async def rerun_job(request: web.Request) -> web.Response:
    """``POST .../jobs/{id}/rerun``: 201 with the new job."""
    caller(request)
    job = await request.app[JOBS].rerun(_job_id(request))
    return web.json_response(job.to_dict(), status=201)


async def _engine_of(
    request: web.Request, authorize: Callable[[web.Request], None] = caller
) -> tuple[str, str]:
    authorize(request)
    job_id = _job_id(request)
    got = await request.app[JOBS].store.get(job_id)
    if got is None or got[0].engine is None:
        raise ControlRefused(404, "unknown_job", f"job {job_id} has not run on any engine")
    return job_id, got[0].engine


async def job_log(request: web.Request) -> web.StreamResponse:
    """``GET .../jobs/{id}/log?tail=N&follow=1``: the engine's stream, passed on as it comes."""
    return await passed_on(request, "log", {"Content-Type": "text/plain; charset=utf-8"})


async def passed_on(
    request: web.Request,
    what: str,
    headers: dict[str, str] | None = None,
    params: dict[str, str] | None = None,
    authorize: Callable[[web.Request], None] = caller,
) -> web.StreamResponse:
    """The engine's answer to ``jobs/{id}/<what>``, streamed through as it comes (its
    type and file name kept, unless ``headers`` says); ``params``: the query's, unless
    given, and ``authorize``: the control token's check, unless given (Scrapyd's paths)."""
    job_id, engine = await _engine_of(request, authorize)
    if params is None:
        params = {k: v[:20] for k, v in request.query.items() if k in _QUERY}
    async with request.app[CONTROL_KEY].stream(engine, f"jobs/{job_id}/{what}", params) as resp:
        if resp.status != 200:
            raise await _refused(engine, resp)
        kept = {k: resp.headers[k] for k in _PASSED if k in resp.headers}
        out = web.StreamResponse(headers=headers or kept)
        out.enable_chunked_encoding()
        await out.prepare(request)
        async for chunk in resp.content.iter_any():
            await out.write(chunk)
        await out.write_eof()
        return out


async def _refused(engine: str, resp: aiohttp.ClientResponse) -> ControlRefused:
    """The engine's refusal passed on: its status and reason for a bad request or an
    unknown job or file (4xx), else 502."""
    try:
        reason = json.loads(await resp.content.read(4096))["error"]
        code, message = str(reason["code"])[:40], str(reason["message"])[:500]
    except (ValueError, RecursionError, KeyError, TypeError):
        code, message = "engine_refused", f"engine {engine!r} answered {resp.status}"
    status = resp.status if resp.status in (400, 404) else 502
    return ControlRefused(status, code, message)


async def job_items(request: web.Request) -> web.StreamResponse:
    """``GET .../jobs/{id}/items?offset=&limit=``: a page of the job's kept items (``feed=N``:
    of its JSON-lines feed); ``format=jsonl|csv``: a download, streamed from the engine."""
    if "format" in request.query:
        return await passed_on(request, "items")
    job_id, engine = await _engine_of(request)
    params = {k: v[:20] for k, v in request.query.items() if k in _QUERY}
    async with request.app[CONTROL_KEY].stream(engine, f"jobs/{job_id}/items", params) as resp:
        raw = await resp.content.read(MAX_ITEMS_ANSWER + 1)
        if len(raw) > MAX_ITEMS_ANSWER:
            raise ControlRefused(502, "answer_too_large", "the engine's page is too large")
        try:
            body = json.loads(raw)
        except (ValueError, RecursionError):
            raise ControlRefused(502, "engine_garbage", "the engine's answer is not JSON") from None
        return web.json_response(body, status=resp.status)


def add_routes(app: web.Application, jobs: Jobs, control: Control) -> None:
    """The job routes on the monitor's app."""
    app[JOBS] = jobs
    app[CONTROL_KEY] = control
    base = "/netdiscovery/monitor/jobs"
    app.router.add_get(base, list_jobs)
    app.router.add_post(base, create_job)
    app.router.add_get(base + "/{id}", show_job)
    app.router.add_post(base + "/{id}/cancel", cancel_job)
    app.router.add_post(base + "/{id}/rerun", rerun_job)
    app.router.add_get(base + "/{id}/log", job_log)
    app.router.add_get(base + "/{id}/items", job_items)
