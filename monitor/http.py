"""The monitor's HTTP endpoint (aiohttp.web inside the running loop).

Routes (docs/http-api.md): ``GET /netdiscovery/monitor`` (engines with state, since,
incarnation, status_url), ``GET /netdiscovery/events`` (recent events; ``?since=SEQ``
for polling, ``?limit=N``), ``GET /netdiscovery/health`` (200, or 503 while the
view is stale), ``GET /metrics`` (Prometheus), ``GET /netdiscovery/monitor/spiders``
(each engine's spiders and their pages/s, items/s and errors/s over ``?span=``, cluster
totals),
``POST /netdiscovery/monitor/engines/{id}/spiders/{name}/{action}`` (pause, resume,
stop through the monitor: :mod:`monitor.control`), the project routes under
``/netdiscovery/monitor/projects`` (:mod:`monitor.projects`), ``GET
/netdiscovery/monitor/alerts`` (hooks, alerts waiting and sent), and the dashboard's pages
(:data:`PAGES`, static HTML whose scripts poll the JSON routes, under a strict CSP), and
Scrapyd's JSON API at Scrapyd's paths (:mod:`monitor.scrapyd`).
Errors are real status codes with a JSON body.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable
from importlib import resources
from typing import TYPE_CHECKING, Any

import structlog
from aiohttp import web
from kazoo.exceptions import KazooException

from monitor.control import ACTIONS, Control, check_caller
from monitor.history import RECENT_SPAN
from monitor.jobroutes import add_routes
from monitor.schedroutes import add_routes as add_schedule_routes
from monitor.scrapyd import ScrapydApi
from netdisco import serving
from netdisco.exceptions import ApiError

if TYPE_CHECKING:
    from monitor.daemon import Monitor  # which imports this module: types only

log = structlog.get_logger(__name__)


STATE: web.AppKey[Monitor] = web.AppKey("monitor")
CONTROL = web.AppKey("control", Control)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _error(status: int, code: str, message: str) -> web.Response:
    return web.json_response({"error": {"code": code, "message": message}}, status=status)


@web.middleware
async def json_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """404/405 and friends as JSON, like every other answer of the API."""
    try:
        return await handler(request)
    except ApiError as exc:
        return _error(exc.status, exc.code, exc.message)
    except KazooException as exc:  # the project routes read and write ZooKeeper
        return _error(503, "zookeeper_unavailable", f"ZooKeeper: {type(exc).__name__}")
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        return _error(exc.status, exc.reason.lower().replace(" ", "_"), exc.text or exc.reason)


def _int_param(request: web.Request, name: str, default: int) -> int:
    raw = request.query.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        value = -1
    if value < 0:
        raise web.HTTPBadRequest(text=f"{name} must be a whole number >= 0, not {raw!r}")
    return value


async def monitor_view(request: web.Request) -> web.Response:
    return web.json_response(request.app[STATE].snapshot())


async def events(request: web.Request) -> web.Response:
    since = _int_param(request, "since", 0)
    limit = _int_param(request, "limit", 100)
    return web.json_response({"events": request.app[STATE].recent_events(since, limit)})


async def health(request: web.Request) -> web.Response:
    ok, body = request.app[STATE].health()
    return web.json_response(body, status=200 if ok else 503)


async def metrics(request: web.Request) -> web.Response:
    body = request.app[STATE].metrics_text()
    return web.Response(body=body, content_type="text/plain", charset="utf-8")


_SPAN = re.compile(r"(\d{1,6})([smh])")
_UNIT = {"s": 1, "m": 60, "h": 3600}


def span_param(raw: str | None, hours: float) -> float:
    """``?span=`` of the history route: ``10m`` (the default), ``90s``, ``1h``... within
    a minute and ``[http] history_hours``, in seconds."""
    if raw is None:
        return float(RECENT_SPAN)
    match = _SPAN.fullmatch(raw)
    seconds = int(match[1]) * _UNIT[match[2]] if match else 0
    if not 60 <= seconds <= hours * 3600:
        shown = raw if len(raw) <= 20 else raw[:20] + "..."
        raise web.HTTPBadRequest(
            text=f"span must be a duration like 10m, 1h or 6h, from 1m to {hours:g}h "
            f"([http] history_hours), not {shown!r}"
        )
    return float(seconds)


async def spider_history(request: web.Request) -> web.Response:
    state = request.app[STATE]
    span = span_param(request.query.get("span"), state.config.http.history_hours)
    return web.json_response(state.spider_history(span))


async def control(request: web.Request) -> web.Response:
    """Pass one action to an engine; its answer comes back with its status code."""
    ctl, info = request.app[CONTROL], request.match_info
    sockname = request.transport.get_extra_info("sockname") if request.transport else None
    check_caller(
        ctl.settings, request.headers, request.host, str(sockname[0]) if sockname else None
    )
    if info["action"] not in ACTIONS:
        raise web.HTTPNotFound(
            text=f"unknown action {info['action']!r}; known: {', '.join(ACTIONS)}"
        )
    status, body = await ctl.act(info["engine"], info["spider"], info["action"])
    return web.json_response(body, status=status)


def retry_selection(body: Any) -> dict[str, Any]:
    """A retry's body, checked: ``{}`` (all), ``{"reason": r}`` or ``{"ids": [...]}``."""
    if body is None or body == {}:
        return {}
    reason = body.get("reason") if isinstance(body, dict) and set(body) == {"reason"} else None
    if isinstance(reason, str) and 0 < len(reason) <= 200:
        return {"reason": reason}
    ids = body.get("ids") if isinstance(body, dict) and set(body) == {"ids"} else None
    if (
        isinstance(ids, list)
        and 0 < len(ids) <= 1000
        and all(isinstance(i, str) and 0 < len(i) <= 100 for i in ids)
    ):
        return {"ids": ids}
    raise web.HTTPBadRequest(text='a retry is {}, {"reason": "..."} or {"ids": ["..."]}')


async def failed(request: web.Request) -> web.Response:
    """One spider's failed requests, from every engine that runs it."""
    state = request.app[STATE]
    return web.json_response(await state.failed.gather(state.watcher.members(),
                                                       request.match_info["spider"]))  # fmt: skip


async def retry(request: web.Request) -> web.Response:
    """Re-queue an engine's failed requests of a spider through the control proxy."""
    ctl, info = request.app[CONTROL], request.match_info
    sockname = request.transport.get_extra_info("sockname") if request.transport else None
    check_caller(
        ctl.settings, request.headers, request.host, str(sockname[0]) if sockname else None
    )
    raw = await request.content.read(1 << 16)
    try:
        body = json.loads(raw) if raw.strip() else None
    except ValueError:
        raise web.HTTPBadRequest(text="the body is not JSON") from None
    selection = retry_selection(body)
    status, answer = await ctl.act(info["engine"], info["spider"], "failed/retry", selection)
    return web.json_response(answer, status=status)


#: the dashboard's pages: path -> file under monitor/static
PAGES = {
    "/": "engines.html",
    "/spiders": "spiders.html",
    "/jobs": "jobs.html",
    "/projects": "projects.html",
    "/schedules": "schedules.html",
    "/alerts": "alerts.html",
}
_ASSET = re.compile(r"[a-z][a-z0-9-]{0,40}\.(js|css)")
_TYPES = {"js": "text/javascript", "css": "text/css"}
#: the pages load only the monitor's own files and talk only to the monitor: no inline
#: script or handler, no other origin (an injected string could not run even if shown)
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
    "img-src 'self' data: blob:; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)


def _static(name: str) -> str:
    return resources.files("monitor").joinpath(f"static/{name}").read_text("utf-8")


def page(name: str) -> Handler:
    """One dashboard page: static HTML that polls the JSON routes (its script: /static/)."""

    async def serve(request: web.Request) -> web.Response:
        headers = {"Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff"}
        return web.Response(
            text=_static(name), content_type="text/html", charset="utf-8", headers=headers
        )

    return serve


async def asset(request: web.Request) -> web.Response:
    """A page's script or style sheet, by a plain file name only."""
    name = request.match_info["name"]
    match = _ASSET.fullmatch(name)
    if match is None or not resources.files("monitor").joinpath(f"static/{name}").is_file():
        raise web.HTTPNotFound(text=f"no file {name[:60]!r}")
    headers = {"X-Content-Type-Options": "nosniff", "Cache-Control": "no-cache"}
    return web.Response(
        text=_static(name), content_type=_TYPES[match[1]], charset="utf-8", headers=headers
    )


async def alerts_view(request: web.Request) -> web.Response:
    """``GET /netdiscovery/monitor/alerts``: the hooks, alerts waiting out their grace or
    being sent, the last deliveries with their result, and which monitor delivers."""
    state = request.app[STATE]
    return web.json_response({**state.alerts.view(), "monitors": state.latch.view()})


def make_app(state: Monitor, ctl: Control) -> web.Application:
    # a path with doubled slashes is redirected to its route: Scrapyd's clients join the
    # deploy URL (``http://host:6800/`` in scrapy.cfg) and ``/listprojects.json``
    merged = web.normalize_path_middleware(append_slash=False, merge_slashes=True)
    app = web.Application(middlewares=[json_errors, merged])
    app[STATE] = state
    app[CONTROL] = ctl
    for path, name in PAGES.items():
        app.router.add_get(path, page(name))
    app.router.add_get("/static/{name}", asset)
    app.router.add_get("/netdiscovery/monitor/alerts", alerts_view)
    app.router.add_get("/netdiscovery/monitor", monitor_view)
    app.router.add_get("/netdiscovery/events", events)
    app.router.add_get("/netdiscovery/health", health)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/netdiscovery/monitor/spiders", spider_history)
    app.router.add_post("/netdiscovery/monitor/engines/{engine}/spiders/{spider}/{action}", control)
    state.projects.add_routes(app)
    add_routes(app, state.jobs, ctl)
    add_schedule_routes(app, state.schedules)
    ScrapydApi(state.projects, state.jobs).add_routes(app)  # Scrapyd's paths, at the root
    app.router.add_get("/netdiscovery/monitor/spiders/{spider}/failed", failed)
    app.router.add_post(
        "/netdiscovery/monitor/engines/{engine}/spiders/{spider}/failed/retry", retry
    )
    return app


class HttpServer:
    """AppRunner + TCPSite; ``port`` is the bound one (useful with port 0)."""

    def __init__(self, state: Monitor, ctl: Control, host: str, port: int) -> None:
        self.host = host
        self.port = port
        self._runner = serving.runner(make_app(state, ctl), access_log=None)

    async def start(self) -> None:
        await self._runner.setup()
        site = serving.BoundedSite(self._runner, self.host, self.port)
        await site.start()
        self.port = int(self._runner.addresses[0][1])
        log.info("http_listening", url=self.url)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    async def close(self) -> None:
        await self._runner.cleanup()
