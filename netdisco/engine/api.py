"""The engine's HTTP endpoint: status, lifecycle control and metrics (docs/http-api.md).

It runs inside the engine's own loop (``AppRunner`` / ``TCPSite``), so handlers
read crawler state directly, without locks. Every answer is JSON with a real
status code; errors are ``{"error": {"code", "message"}}``, and a middleware makes
sure even a bug answers a logged JSON 500 rather than a stack trace. Control
(POST) routes check the bearer token before they look at anything else; the
token is never logged or echoed. ``GET /netdiscovery/spiders`` reuses its
rendered body for ``status_cache`` seconds (counters may lag that long; any state
change clears it at once), because dashboards poll it hard while the same loop crawls.
"""

from __future__ import annotations

import hmac
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import urlsplit

import structlog
from aiohttp import web

from netdisco import serving
from netdisco.cluster.contract import ENGINE_HEADER
from netdisco.crawl.crawler import Crawler, SpiderState
from netdisco.engine import failed_api, status_page
from netdisco.engine.config import is_loopback
from netdisco.engine.jobroutes import job_items, job_log
from netdisco.engine.lifecycle import EngineState
from netdisco.engine.metrics import CONTENT_TYPE, EngineMetrics
from netdisco.engine.replies import (
    Handler,
    dumps,
    error_response,
    errors_middleware,
    json_response,
    read_json,
)
from netdisco.engine.targets import private_target
from netdisco.exceptions import ApiError

if TYPE_CHECKING:
    from netdisco.engine.engine import SpiderEngine  # engine -> sidecar -> api: types only

log = structlog.get_logger(__name__)


class Behind(Protocol):
    """The status process an app is served behind (``netdisco.engine.sidecar``)."""

    @property
    def loopback(self) -> bool:
        """Whether the address clients reach is a loopback one."""
        ...

    async def publish(self) -> int:
        """Send the read routes' answers now; the number of that batch."""
        ...


@web.middleware
async def _identified(request: web.Request, handler: Handler) -> web.StreamResponse:
    """A request that names another engine (``ENGINE_HEADER``) is refused, so a caller
    that reached the wrong engine (an advertised address now served by another) acts
    on nothing."""
    engine_id = request.app[ENGINE].id
    asked = request.headers.get(ENGINE_HEADER)
    if asked is not None and asked != engine_id:
        message = f"this is engine {engine_id!r}, not {asked[:200]!r}"
        return error_response(409, "wrong_engine", message)
    return await handler(request)


def _signer(engine: SpiderEngine) -> Callable[[web.Request, web.StreamResponse], Awaitable[None]]:
    async def sign(_request: web.Request, response: web.StreamResponse) -> None:
        """Every answer, streamed ones too, names the engine that gave it."""
        response.headers[ENGINE_HEADER] = engine.id

    return sign


@web.middleware
async def _publishing(request: web.Request, handler: Handler) -> web.StreamResponse:
    """After a request that may change state, the status process gets the new answers
    before the client gets this one (read-your-writes through the snapshot)."""
    response = await handler(request)
    if request.method != "GET":
        response.headers["X-Netdisco-Seq"] = str(await request.app[BEHIND].publish())
    return response


class StatusCache:
    """The rendered ``/spiders`` body, reused for ``ttl`` seconds or until a change."""

    def __init__(self, engine: SpiderEngine, ttl: float) -> None:
        self._engine = engine
        self._ttl = ttl
        self._body: bytes | None = None
        self._expires = 0.0

    def body(self) -> bytes:
        """The current body, rendering it again when stale."""
        now = time.monotonic()
        if self._body is None or now >= self._expires:
            self._body = dumps(spiders_body(self._engine))
            self._expires = now + self._ttl
        return self._body

    def clear(self, _engine: Any = None) -> None:
        """Forget the body (a spider was added or changed state)."""
        self._body = None


ENGINE: web.AppKey[SpiderEngine] = web.AppKey("engine")
CACHE = web.AppKey("spiders_cache", StatusCache)
METRICS = web.AppKey("metrics", EngineMetrics)
BEHIND = web.AppKey("behind", Behind)


# -- read-only routes ----------------------------------------------------------------


def live_body(engine: SpiderEngine) -> tuple[int, dict[str, Any]]:
    """Liveness: answered at all means the loop turns; 200 until the engine has stopped.
    ZooKeeper's state does not count here: an outage must not get a crawling engine
    restarted (that is readiness)."""
    alive = engine.state is not EngineState.STOPPED
    body = {"live": alive, "engine": str(engine.state), "id": engine.id,
            "loop_lag": engine.watchdog.lag}  # fmt: skip
    return (200 if alive else 503), body


def ready_body(engine: SpiderEngine) -> tuple[int, dict[str, Any]]:
    """Readiness: running, registered (or standalone), loop not stalled: able to take work."""
    status, body = health_body(engine)
    return status, {"ready": status == 200, **body}


def health_body(engine: SpiderEngine) -> tuple[int, dict[str, Any]]:
    """200 while running and registered (or standalone); 503 otherwise."""
    registered = engine.registry_healthy
    stalled = engine.watchdog.stalled
    ok = engine.state is EngineState.RUNNING and registered is not False and not stalled
    counts: dict[str, int] = {}
    for crawler in engine.crawlers():
        counts[str(crawler.state)] = counts.get(str(crawler.state), 0) + 1
    body = {
        "status": "ok" if ok else "stalled" if stalled else "degraded",
        "loop_lag": engine.watchdog.lag,
        "engine": str(engine.state),
        "id": engine.id,
        "incarnation": engine.incarnation,
        "registry": _registry_state(engine),
        "registry_detail": engine.registry_said,
        "spiders": counts,
    }
    return (200 if ok else 503), body


def _registry_state(engine: SpiderEngine) -> str:
    if engine.registry is None:
        return "standalone"
    return str(engine.registry.status().get("state", "unknown"))


_SUMMARY_KEYS = ("name", "state", "started_at", "succeeded", "failed", "items", "queue_size")


def spiders_body(engine: SpiderEngine) -> list[dict[str, Any]]:
    """Every spider's status object, then every running job's (its child's last status)."""
    jobs = engine.jobs.status() if engine.jobs is not None else []
    return [*(engine.spider_status(c.name) for c in engine.crawlers()), *jobs]


def engine_body(engine: SpiderEngine) -> dict[str, Any]:
    """Identity, incarnation, registry state and spider summaries."""
    spiders = spiders_body(engine)
    return {
        **engine.describe().to_dict(),
        "state": str(engine.state),
        "registry": None if engine.registry is None else engine.registry.status(),
        "spiders": [{key: s.get(key) for key in _SUMMARY_KEYS} for s in spiders],
    }


async def health(request: web.Request) -> web.Response:
    """``GET /netdiscovery/health``: see ``health_body``."""
    status, body = health_body(request.app[ENGINE])
    return json_response(body, status)


async def live(request: web.Request) -> web.Response:
    """``GET|HEAD /netdiscovery/live``: see ``live_body``."""
    status, body = live_body(request.app[ENGINE])
    return json_response(body, status)


async def ready(request: web.Request) -> web.Response:
    """``GET|HEAD /netdiscovery/ready``: see ``ready_body``."""
    status, body = ready_body(request.app[ENGINE])
    return json_response(body, status)


async def engine_status(request: web.Request) -> web.Response:
    """``GET /netdiscovery/engine``: see ``engine_body``; a page for a browser."""
    engine = request.app[ENGINE]
    body = engine_body(engine)
    if status_page.wants_html(request.headers.get("Accept", "")):
        if engine.jobs is not None:  # for a person: the jobs it ran (read from its disk)
            body["jobs_ran"] = engine.jobs.recent()
        response = web.Response(text=status_page.render(body), content_type="text/html")
    else:
        response = json_response(body)
    response.headers["Vary"] = "Accept"
    return response


async def root(request: web.Request) -> web.Response:
    """``GET /``: to the status page, under the prefix the app is mounted at, if any."""
    raise web.HTTPFound(request.app.router["engine"].url_for())


async def spiders(request: web.Request) -> web.Response:
    """Every spider's status object."""
    body = request.app[CACHE].body()
    return web.Response(body=body, content_type="application/json")


async def spider(request: web.Request) -> web.Response:
    """One spider's status object (404 if unknown)."""
    return json_response(request.app[ENGINE].spider_status(request.match_info["name"]))


async def metrics(request: web.Request) -> web.Response:
    """Prometheus text exposition, built from the crawlers' stats right now."""
    body = request.app[METRICS].render()
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE})


# -- control routes ------------------------------------------------------------------


def authorize(request: web.Request) -> SpiderEngine:
    """Let a control request through, or raise 401/403; the token is compared in constant time."""
    engine = request.app[ENGINE]
    if not engine.settings.control:
        raise ApiError(403, "control_disabled", "control is disabled on this engine")
    token = engine.settings.token
    if token is None:
        if not _served_on_loopback(request):
            # an application that mounts these routes on a public address without a token
            raise ApiError(
                403,
                "control_needs_token",
                "control without a token is only served on a loopback address",
            )
        return engine
    scheme, _, given = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not given.strip():
        raise ApiError(401, "unauthorized", "control needs an 'Authorization: Bearer' token")
    try:  # aiohttp keeps bytes that are not UTF-8 as lone surrogates, which cannot encode
        offered = given.strip().encode()
    except UnicodeEncodeError:
        raise ApiError(401, "unauthorized", "the Authorization header is not UTF-8") from None
    if not hmac.compare_digest(offered, token.encode()):
        raise ApiError(403, "forbidden", "the bearer token is not valid for this engine")
    return engine


def _served_on_loopback(request: web.Request) -> bool:
    """Whether the socket this request arrived on is bound to a loopback address (behind
    the status process, whether the address that process listens on is)."""
    behind = request.app.get(BEHIND)
    if behind is not None:
        return behind.loopback
    sockname = request.transport.get_extra_info("sockname") if request.transport else None
    if isinstance(sockname, str | bytes):
        return True  # a Unix socket: only this machine can reach it
    if not sockname:
        return False
    return is_loopback(str(sockname[0]))


def _control(action: str) -> Handler:
    async def handle(request: web.Request) -> web.Response:
        engine = authorize(request)
        name = request.match_info["name"]
        state: SpiderState
        if action == "pause":
            state = engine.pause(name)
        elif action == "resume":
            state = engine.resume(name)
        else:
            state = await engine.stop_spider(name)
        request.app[CACHE].clear()
        log.info("spider_control", engine=engine.id, spider=name, action=action, state=str(state))
        return json_response({"name": name, "state": str(state)})

    handle.__doc__ = f"POST .../{action}: 200 with the new state, 409 if not allowed now."
    return handle


async def push_requests(request: web.Request) -> web.Response:
    """Schedule URLs on a spider: 202 with what was accepted and why the rest was not."""
    engine = authorize(request)
    crawler = engine.crawler(request.match_info["name"])
    urls = await _read_urls(request, engine.settings.max_body)
    refused = _refused(crawler, urls)
    valid = [u for u in urls if isinstance(u, str) and u not in refused]
    result = await engine.push(crawler.name, valid)
    rejected = [{"url": url, "reason": reason} for url, reason in result.rejected]
    rejected += [{"url": url, "reason": reason} for url, reason in refused.items()]
    rejected += [{"url": u, "reason": "not a string"} for u in urls if not isinstance(u, str)]
    body = {"name": crawler.name, "accepted": len(result.accepted), "rejected": rejected}
    return json_response(body, 202)


def _refused(crawler: Crawler, urls: list[Any]) -> dict[str, str]:
    """The pushed URLs that point inside the engine's network, with the reason."""
    if crawler.settings.allow_private_targets:
        return {}
    domains = crawler.spider.allowed_domains
    reasons = {u: private_target(u, domains) for u in urls if isinstance(u, str)}
    return {url: reason for url, reason in reasons.items() if reason is not None}


async def _read_urls(request: web.Request, max_body: int) -> list[Any]:
    """The ``urls`` list of a JSON body."""
    data = await read_json(request, max_body)
    if not isinstance(data, dict) or not isinstance(data.get("urls"), list):
        raise ApiError(400, "invalid_body", 'expected a JSON object {"urls": [...]}')
    urls: list[Any] = data["urls"]
    if not urls:
        raise ApiError(400, "invalid_body", '"urls" must not be empty')
    return urls


async def start_spider(request: web.Request) -> web.Response:
    """``POST /netdiscovery/spiders``: start a spider from an allowed module (201)."""
    engine = authorize(request)
    crawler = await engine.launch(await read_json(request, engine.settings.max_body))
    request.app[CACHE].clear()
    log.info("spider_launched", engine=engine.id, spider=crawler.name)
    return json_response(engine.spider_status(crawler.name), 201)


async def delete_spider(request: web.Request) -> web.Response:
    """``DELETE /netdiscovery/spiders/{name}``: forget a spider that is done (409 if not)."""
    engine = authorize(request)
    name = request.match_info["name"]
    engine.remove_spider(name)
    request.app[CACHE].clear()
    return json_response({"name": name, "deleted": True})


def _job_route(
    handler: Callable[[web.Request, SpiderEngine], Awaitable[web.StreamResponse]],
) -> Handler:
    async def handle(request: web.Request) -> web.StreamResponse:
        return await handler(request, authorize(request))

    handle.__doc__ = handler.__doc__
    return handle


async def _check_mount(app: web.Application) -> None:
    """Mounted under a prefix of an application (``add_subapp``), the routes must be where
    the engine's node says they are (``advertise_url``): say so at once if they are not."""
    engine = app[ENGINE]
    served = str(app.router["engine"].url_for()).removesuffix("/netdiscovery/engine")
    advertised = urlsplit(engine.status_url).path.removesuffix("/netdiscovery/engine")
    if served and served != advertised:
        log.warning(
            "engine_mount_mismatch",
            engine=engine.id,
            served_under=served,
            status_url=engine.status_url,
            hint=f"set advertise_url to http(s)://HOST:PORT{served}",
        )


def create_app(engine: SpiderEngine, *, behind: Behind | None = None) -> web.Application:
    """The endpoint's application; the routes of the table in docs/http-api.md.

    ``behind`` is the status process when the app is served behind it, on a private
    Unix socket (``netdisco.engine.sidecar``).
    """
    middlewares = [_identified, errors_middleware]
    if behind is not None:
        middlewares.insert(1, _publishing)
    app = web.Application(middlewares=middlewares, client_max_size=engine.settings.max_body)
    if behind is not None:
        app[BEHIND] = behind
    app.on_response_prepare.append(_signer(engine))
    app.on_startup.append(_check_mount)
    cache = StatusCache(engine, engine.settings.status_cache)
    engine.add_listener(cache.clear)
    app[ENGINE] = engine
    app[CACHE] = cache
    app[METRICS] = EngineMetrics(engine)
    app.router.add_get("/netdiscovery/health", health)
    app.router.add_get("/netdiscovery/live", live)
    app.router.add_get("/netdiscovery/ready", ready)
    app.router.add_get("/netdiscovery/engine", engine_status, allow_head=False, name="engine")
    app.router.add_get("/netdiscovery/spiders", spiders, allow_head=False)
    app.router.add_post("/netdiscovery/spiders", start_spider)
    app.router.add_get("/netdiscovery/spiders/{name}", spider, allow_head=False)
    app.router.add_delete("/netdiscovery/spiders/{name}", delete_spider)
    for action in ("pause", "resume", "stop"):
        app.router.add_post(f"/netdiscovery/spiders/{{name}}/{action}", _control(action))
    app.router.add_post("/netdiscovery/spiders/{name}/requests", push_requests)
    app.router.add_get("/netdiscovery/jobs/{id}/log", _job_route(job_log), allow_head=False)
    app.router.add_get("/netdiscovery/jobs/{id}/items", _job_route(job_items), allow_head=False)
    failed_api.add_routes(app)
    app.router.add_get("/metrics", metrics, allow_head=False)
    app.router.add_get("/", root, allow_head=False)
    return app


class HttpEndpoint:
    """The endpoint bound to a TCP port in the running loop."""

    def __init__(self, engine: SpiderEngine) -> None:
        self._engine = engine
        self._runner: web.AppRunner | None = None

    async def start(self, host: str, port: int) -> int:
        """Bind and serve; the port actually bound (``port=0`` picks a free one)."""
        runner = serving.runner(
            create_app(self._engine), access_log=None, handle_signals=False, shutdown_timeout=5.0
        )
        await runner.setup()
        try:
            await serving.BoundedSite(runner, host, port).start()
        except OSError as exc:
            await runner.cleanup()
            raise OSError(exc.errno, f"cannot serve HTTP on {host}:{port}: {exc.strerror}") from exc
        self._runner = runner
        return int(runner.addresses[0][1])

    async def stop(self) -> None:
        """Close the listener and idle connections."""
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
