"""Scrapyd's JSON API on the monitor, so that Scrapyd's tools drive the cluster unchanged.

``scrapyd-deploy``, ``scrapyd-client`` and the Python clients of Scrapyd's API call the
paths Scrapyd 1.6 serves (``/addversion.json``, ``/schedule.json``, ``/listjobs.json``,
... and a job's ``/logs/`` and ``/items/``), with its parameters, and read its answers:
``{"node_name": ..., "status": "ok", ...}``, or ``{"status": "error", "message": ...}``
with status 200 as Scrapyd answers a bad request (401, 403, 413 and 503 keep theirs).
Nothing here is a second implementation: an egg becomes a directory project
(:func:`netdisco.projects.archive.from_egg`, checked as any upload) stored by
:meth:`monitor.projects.Projects.deploy`; a scheduled spider is a job of
:class:`monitor.jobs.Jobs` (placed on any engine, requeued when its engine is lost);
logs and items come from the job routes. HTTP basic auth's password is the token
(:func:`monitor.control.presented`): deploying wants the deploy token, scheduling and
cancelling the control token (or the deploy token: scrapy.cfg has one password), a job's
log and items too; the listings are open like the monitor's other GET routes.
"""

from __future__ import annotations

import asyncio
import re
import socket
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl

import structlog
from aiohttp import BodyPartReader, web
from kazoo.exceptions import KazooException, NodeExistsError
from multidict import MultiDict

from monitor import jobroutes
from monitor.jobs import will_requeue
from netdisco.cluster.jobs import Job, JobState, is_job_id
from netdisco.exceptions import (
    ApiError,
    ConfigError,
    ControlRefused,
    NetdiscoError,
    ProjectRefused,
)
from netdisco.projects.archive import check_label, check_project_name, from_egg

if TYPE_CHECKING:
    from monitor.jobs import Jobs
    from monitor.projects import Projects

log = structlog.get_logger(__name__)

#: the most bytes of one form field but the egg, and the most fields of one request
MAX_FIELD = 8 * 1024
MAX_FIELDS = 200
#: a request's own fields; the other fields of ``schedule.json`` are spider arguments
_OWN = frozenset({"project", "spider", "_version", "jobid", "priority", "setting"})
_SETTING = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,99}")
#: statuses an error keeps; Scrapyd answers any other error with 200 and "status": "error"
_KEPT_STATUS = frozenset({401, 403, 413, 503})
#: a job's state as Scrapyd names it (a lost job: pending while it will be placed again)
_STATES = {
    JobState.PENDING: "pending",
    JobState.RUNNING: "running",
    JobState.FINISHED: "finished",
    JobState.FAILED: "finished",
    JobState.CANCELLED: "finished",
}

Handler = Callable[["ScrapydApi", web.Request], Awaitable[dict[str, Any]]]
Form = MultiDict[str]


class ScrapydError(ApiError):
    """A request Scrapyd would refuse; answered with status 200, as Scrapyd does."""

    def __init__(self, message: str) -> None:
        super().__init__(200, "scrapyd_error", message)


def _answer(node: str, body: dict[str, Any], status: int = 200) -> web.Response:
    return web.json_response({"node_name": node, **body}, status=status)


def _wrapped(handler: Handler) -> Callable[[ScrapydApi, web.Request], Awaitable[web.Response]]:
    """A route's answer in Scrapyd's shape: ``status`` ok, or error with its message."""

    async def route(api: ScrapydApi, request: web.Request) -> web.Response:
        try:
            body = await handler(api, request)
        except ApiError as exc:
            status = exc.status if exc.status in _KEPT_STATUS else 200
            return _answer(api.node, {"status": "error", "message": exc.message}, status)
        except NetdiscoError as exc:
            return _answer(api.node, {"status": "error", "message": str(exc)})
        except KazooException as exc:
            message = f"ZooKeeper is unavailable: {type(exc).__name__}"
            return _answer(api.node, {"status": "error", "message": message}, 503)
        return _answer(api.node, {"status": "ok", **body})

    return route


def required(form: Form, name: str) -> str:
    """A parameter Scrapyd requires, said as Scrapyd says it when it is missing."""
    value = form.get(name)
    if value is None:
        raise ScrapydError(f"'{name}' parameter is required")
    return value


def project_of(form: Form) -> str:
    """The ``project`` parameter, checked as a project name."""
    return check_project_name(required(form, "project"))


async def _read_capped(part: BodyPartReader, cap: int, name: str) -> bytes:
    chunks, size = [], 0
    while chunk := await part.read_chunk(64 * 1024):
        size += len(chunk)
        if size > cap:
            raise ProjectRefused(413, "too_large", f"the field {name!r} is over {cap} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


async def read_form(request: web.Request, egg_cap: int) -> tuple[Form, bytes | None]:
    """The query's and the body's fields (as Scrapyd reads both), each bounded, and the
    ``egg`` file of a multipart body (at most ``egg_cap`` bytes; 0: none is read)."""
    form: Form = MultiDict(request.query)
    egg = None
    if request.content_type == "multipart/form-data":
        reader = await request.multipart()
        while (part := await reader.next()) is not None:
            if not isinstance(part, BodyPartReader):
                raise ScrapydError("a form field is itself multipart: send fields and files")
            name = part.name or ""
            if name == "egg" and egg_cap and egg is None:
                egg = await _read_capped(part, egg_cap, name)
            else:
                raw = await _read_capped(part, MAX_FIELD, name)
                form.add(name, raw.decode("utf-8", "replace"))
            if len(form) > MAX_FIELDS:
                raise ScrapydError(f"a request has at most {MAX_FIELDS} fields")
    elif request.method == "POST":
        form.extend(await _urlencoded(request))
    return form, egg


async def _urlencoded(request: web.Request) -> list[tuple[str, str]]:
    """The fields of an urlencoded body, bounded as a multipart one's."""
    raw = await request.content.read(MAX_FIELDS * MAX_FIELD + 1)
    if len(raw) > MAX_FIELDS * MAX_FIELD:
        raise ProjectRefused(413, "too_large", "the form is too large")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ScrapydError("the form is not UTF-8") from None
    try:
        return parse_qsl(text, keep_blank_values=True, max_num_fields=MAX_FIELDS)
    except ValueError:
        raise ScrapydError(f"a request has at most {MAX_FIELDS} fields") from None


def schedule_body(form: Form) -> tuple[dict[str, Any], str | None]:
    """A ``schedule.json`` form as a job request (``setting=K=V`` repeated, the other
    fields the spider's arguments) and the ``jobid`` asked, if any; checked."""
    settings: dict[str, str] = {}
    for pair in form.getall("setting", []):
        name, sep, value = pair.partition("=")
        if not sep or not _SETTING.fullmatch(name):
            raise ScrapydError(f"setting is invalid: expected NAME=VALUE, got {pair[:80]!r}")
        settings[name] = value
    try:
        float(form.get("priority", "0"))
    except ValueError:
        raise ScrapydError("priority is invalid: not a number") from None
    jobid = form.get("jobid")
    if jobid is not None and not is_job_id(jobid):
        raise ScrapydError(
            f"jobid is invalid: a job id is 12 hexadecimal digits, not {jobid[:40]!r}"
        )
    args = {k: v for k, v in form.items() if k not in _OWN}
    body = {
        **{"project": project_of(form), "spider": required(form, "spider"), "args": args},
        **{"settings": settings, "version": form.get("_version"), "on_lost": "requeue"},
    }
    return body, jobid


def _time(at: float | None) -> str | None:
    """A time as Scrapyd writes it (``str`` of a local datetime)."""
    return None if at is None else str(datetime.fromtimestamp(at))


def job_row(job: Job, state: str) -> dict[str, Any]:
    """One job as ``listjobs.json`` lists it under ``state`` (that list's fields)."""
    assert job.project is not None
    base = {"id": job.id, "project": job.project, "spider": job.spider}
    if state == "pending":
        args = dict(job.args)
        return {**base, "version": job.version, "settings": dict(job.settings), "args": args}
    urls = {
        "log_url": f"/logs/{job.project}/{job.spider}/{job.id}.log",
        "items_url": f"/items/{job.project}/{job.spider}/{job.id}.jl",
    }
    start = {"pid": None, "start_time": _time(job.started_at)}
    if state == "running":
        return {**base, **start, **urls}
    return {**base, "start_time": start["start_time"], "end_time": _time(job.ended_at), **urls}


class ScrapydApi:
    """The Scrapyd routes of one monitor, over its projects and its jobs."""

    def __init__(self, projects: Projects, jobs: Jobs, node: str | None = None) -> None:
        self.projects = projects
        self.jobs = jobs
        self.node = node or socket.gethostname()

    def state(self, job: Job) -> str:
        """``currstate`` of a job: pending, running or finished (a lost job is pending
        while it will be placed again, finished when it will not)."""
        if job.state is JobState.LOST:
            again = will_requeue(job, self.jobs.settings.max_attempts)
            return "pending" if again else "finished"
        return _STATES[job.state]

    async def project_jobs(self, project: str | None) -> list[Job]:
        """The jobs of ``project`` (None: of every project) as ZooKeeper holds them now
        (as ``status.json`` reads one), oldest first."""
        found = [j for j in await self.jobs.store.list() if j.project is not None]
        if project is not None:
            found = [j for j in found if j.project == project]
        return sorted(found, key=lambda j: j.created_at)

    def may_run_jobs(self, request: web.Request) -> None:
        """Scheduling, cancelling, a job's log and items: the control token, or the deploy
        token (scrapy.cfg has one password, and who may deploy runs code on every engine
        already); else the control token's refusal."""
        try:
            jobroutes.caller(request)
        except ControlRefused as refused:
            try:
                self.projects.check(request)
            except ControlRefused:
                raise refused from None

    async def known(self, project: str) -> None:
        """A project that is deployed, else Scrapyd's error."""
        if project not in await self.projects.store.projects():
            raise ScrapydError(f"project '{project}' not found")

    @_wrapped
    async def daemonstatus(self, request: web.Request) -> dict[str, Any]:
        counts = {"pending": 0, "running": 0, "finished": 0}
        for job in await self.project_jobs(None):
            counts[self.state(job)] += 1
        return counts

    @_wrapped
    async def addversion(self, request: web.Request) -> dict[str, Any]:
        self.projects.check(request)
        form, egg = await read_form(request, self.projects.max_size)
        project, version = project_of(form), required(form, "version")
        check_label(version)
        if egg is None:
            raise ScrapydError("'egg' parameter is required")
        data = await asyncio.to_thread(from_egg, egg, self.projects.max_size)
        body = await self.projects.deploy(project, data, version)
        log.info("scrapyd_addversion", project=project, version=body["id"], label=version)
        return {"project": project, "version": version, "spiders": len(body["spiders"])}

    @_wrapped
    async def schedule(self, request: web.Request) -> dict[str, Any]:
        self.may_run_jobs(request)
        form, _ = await read_form(request, 0)
        body, jobid = schedule_body(form)
        await self.known(body["project"])
        try:
            (job,) = await self.jobs.create(body, jobid)
        except NodeExistsError:
            raise ScrapydError(f"job {jobid} exists already") from None
        except ConfigError as exc:
            raise ScrapydError(str(exc)) from None
        return {"jobid": job.id}

    @_wrapped
    async def cancel(self, request: web.Request) -> dict[str, Any]:
        self.may_run_jobs(request)
        form, _ = await read_form(request, 0)
        project, job_id = project_of(form), required(form, "job")
        await self.known(project)
        got = await self.jobs.store.get(job_id) if is_job_id(job_id) else None
        if got is None or got[0].project != project:
            return {"prevstate": None}
        before = self.state(got[0])
        if before == "finished":
            return {"prevstate": None}
        await self.jobs.cancel(job_id)
        return {"prevstate": before}

    @_wrapped
    async def status(self, request: web.Request) -> dict[str, Any]:
        form, _ = await read_form(request, 0)
        job_id, project = required(form, "job"), form.get("project")
        if project is not None:
            await self.known(check_project_name(project))
        got = await self.jobs.store.get(job_id) if is_job_id(job_id) else None
        job = got[0] if got is not None else None
        if job is None or job.project is None or project not in (None, job.project):
            return {"currstate": None}
        return {"currstate": self.state(job)}

    @_wrapped
    async def listprojects(self, request: web.Request) -> dict[str, Any]:
        return {"projects": await self.projects.store.projects()}

    @_wrapped
    async def listversions(self, request: web.Request) -> dict[str, Any]:
        form, _ = await read_form(request, 0)
        versions = await self.projects.store.versions(project_of(form))
        return {"versions": [v.label or v.id for v in versions]}

    @_wrapped
    async def listspiders(self, request: web.Request) -> dict[str, Any]:
        form, _ = await read_form(request, 0)
        project, wanted = project_of(form), form.get("_version")
        await self.known(project)
        try:
            version = await self.projects.store.resolve(project, wanted)
        except ProjectRefused:
            raise ScrapydError(f"version '{wanted}' not found") from None
        return {"spiders": sorted(version.names.values())}

    @_wrapped
    async def listjobs(self, request: web.Request) -> dict[str, Any]:
        form, _ = await read_form(request, 0)
        project = form.get("project")
        if project is not None:
            await self.known(check_project_name(project))
        lists: dict[str, list[dict[str, Any]]] = {"pending": [], "running": [], "finished": []}
        for job in await self.project_jobs(project):
            state = self.state(job)
            lists[state].append(job_row(job, state))
        return lists

    @_wrapped
    async def delversion(self, request: web.Request) -> dict[str, Any]:
        self.projects.check(request)
        form, _ = await read_form(request, 0)
        project, wanted = project_of(form), required(form, "version")
        await self.known(project)
        try:
            version = await self.projects.store.resolve(project, wanted)
        except ProjectRefused:
            raise ScrapydError(f"version '{wanted}' not found") from None
        await self.projects.store.delete(project, version.id)
        log.info("scrapyd_delversion", project=project, version=version.id, label=wanted)
        return {}

    @_wrapped
    async def delproject(self, request: web.Request) -> dict[str, Any]:
        self.projects.check(request)
        form, _ = await read_form(request, 0)
        project = project_of(form)
        await self.known(project)
        await self.projects.store.delete_project(project)
        log.info("scrapyd_delproject", project=project)
        return {}

    async def job_file(self, request: web.Request, what: str) -> web.StreamResponse:
        """A job's log (``/logs/...``) or items as JSON lines (``/items/...``), from the
        engine it ran on, when the path's project and spider are the job's."""
        job_id = request.match_info["id"]
        got = await self.jobs.store.get(job_id) if is_job_id(job_id) else None
        path = (request.match_info["project"], request.match_info["spider"])
        if got is None or (got[0].project, got[0].spider) != path:
            raise web.HTTPNotFound(text=f"no job {job_id[:40]!r} of {path[0][:64]}/{path[1][:64]}")
        kind = "text/plain" if what == "log" else "application/x-ndjson"
        headers = {"Content-Type": f"{kind}; charset=utf-8"}
        params = {} if what == "log" else {"format": "jsonl"}
        return await jobroutes.passed_on(request, what, headers, params, self.may_run_jobs)

    def add_routes(self, app: web.Application) -> None:
        """Scrapyd's paths, at the monitor's root as Scrapyd serves them."""
        for name in ("daemonstatus", "status", "listprojects", "listversions", "listspiders",
                     "listjobs"):  # fmt: skip
            app.router.add_get(f"/{name}.json", _bound(self, name))
        for name in ("addversion", "schedule", "cancel", "delversion", "delproject"):
            app.router.add_post(f"/{name}.json", _bound(self, name))
        app.router.add_get("/logs/{project}/{spider}/{id}.log", self.logs)
        app.router.add_get("/items/{project}/{spider}/{id}.jl", self.items)

    async def logs(self, request: web.Request) -> web.StreamResponse:
        """``/logs/{project}/{spider}/{job}.log``: the job's log."""
        return await self.job_file(request, "log")

    async def items(self, request: web.Request) -> web.StreamResponse:
        """``/items/{project}/{spider}/{job}.jl``: the job's items, one JSON object a line."""
        return await self.job_file(request, "items")


def _bound(api: ScrapydApi, name: str) -> Callable[[web.Request], Awaitable[web.Response]]:
    route: Callable[[web.Request], Awaitable[web.Response]] = getattr(api, name)
    return route
