"""Deploying projects through the monitor: the ``/netdiscovery/monitor/projects`` routes.

An upload is read with a size cap, checked completely (:func:`netdisco.projects.archive.
inspect`: in a thread, never imported or run) and only then stored in ZooKeeper, so a
refused archive leaves nothing. Deploying runs code on every engine, so its writes want
the deploy token (``[control] deploy_token_env``), never the control token; without one
they are answered on loopback only. Each deploy is a ``project_deployed`` event.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import structlog
from aiohttp import web
from kazoo.client import KazooClient

from monitor.control import check_token
from monitor.events import Event, EventType, same
from monitor.settings import ControlSettings
from netdisco.cluster.acl import cluster_acl
from netdisco.cluster.settings import ZooKeeperSettings
from netdisco.exceptions import ProjectRefused
from netdisco.projects.archive import check_label, check_project_name, inspect
from netdisco.projects.store import WHEEL_FILENAME, ProjectStore

log = structlog.get_logger(__name__)

PREFIX = "/netdiscovery/monitor/projects"
DEFAULT_MAX_SIZE = 8 * 1024 * 1024


class Projects:
    """The project routes of one monitor: its ZooKeeper client, root, ACL and caps."""

    def __init__(
        self,
        client: KazooClient,
        zookeeper: ZooKeeperSettings,
        control: ControlSettings | None,
        record: Callable[[Event], None],
    ) -> None:
        self.store = ProjectStore(client, zookeeper.root, cluster_acl(zookeeper.credentials()))
        self.token = control.deploy_token if control else None
        self.max_size = control.max_project_size if control else DEFAULT_MAX_SIZE
        self.record = record

    def check(self, request: web.Request) -> None:
        """Only a deployer may write: the deploy token, or loopback without one."""
        sockname = request.transport.get_extra_info("sockname") if request.transport else None
        socket_host = str(sockname[0]) if sockname else None
        check_token(self.token, request.headers, request.host, socket_host, "deploy")

    async def body(self, request: web.Request) -> bytes:
        """The request body, refused (413) as soon as it passes the cap."""
        chunks, size = [], 0
        while chunk := await request.content.read(64 * 1024):
            size += len(chunk)
            if size > self.max_size:
                raise ProjectRefused(
                    413, "too_large", f"the archive is over the cap of {self.max_size} bytes"
                )
            chunks.append(chunk)
        return b"".join(chunks)

    async def upload(self, request: web.Request) -> web.Response:
        self.check(request)
        project = check_project_name(request.match_info["name"])
        label = check_label(request.query.get("version") or None)
        filename = request.query.get("filename") or None
        if filename is not None and not WHEEL_FILENAME.fullmatch(filename):
            raise ProjectRefused(400, "bad_filename", f"not a wheel file name: {filename!r}")
        body = await self.deploy(project, await self.body(request), label, filename)
        return web.json_response(body, status=201 if body["new"] else 200)

    async def deploy(
        self, project: str, data: bytes, label: str | None, filename: str | None = None
    ) -> dict[str, Any]:
        """Check an archive completely, store it, say so (``project_deployed``): the one
        path of every upload, this route's and Scrapyd's ``addversion.json``."""
        manifest = await asyncio.to_thread(inspect, data, self.max_size)
        if (manifest.kind == "wheel") != (filename is not None):
            raise ProjectRefused(
                400, "bad_filename", "a wheel is uploaded with ?filename=<its .whl name>, "
                "and only a wheel",
            )  # fmt: skip
        version, created = await self.store.put(project, data, manifest, label, filename)
        body = {"project": project, **version.to_json(), "new": created}
        kind = EventType.PROJECT_DEPLOYED
        identity = same(kind.value, project, version.id) if created else None  # a re-upload: here
        self.record(Event(type=kind, detail=_detail(body), identity=identity))
        return body

    async def listing(self, request: web.Request) -> web.Response:
        found = [await self.store.describe(name) for name in await self.store.projects()]
        return web.json_response({"projects": found})

    async def show(self, request: web.Request) -> web.Response:
        project = check_project_name(request.match_info["name"])
        return web.json_response(await self.store.describe(project))

    async def spiders(self, request: web.Request) -> web.Response:
        """A version's spiders (``?version=``, else the default): each name and class; and
        the commands it declares as jobs."""
        project = check_project_name(request.match_info["name"])
        wanted = request.query.get("version") or None
        if wanted is not None and len(wanted) > 64:
            raise ProjectRefused(400, "bad_request", "a version is at most 64 characters")
        version = await self.store.resolve(project, wanted)
        rows = [{"name": n, "spider": r} for r, n in version.names.items()]
        body = {"project": project, "version": version.id, "label": version.label}
        commands = [{"name": n, "argv": list(a)} for n, a in sorted(version.commands.items())]
        spiders = sorted(rows, key=lambda r: r["name"])
        return web.json_response({**body, "spiders": spiders, "commands": commands})

    async def delete(self, request: web.Request) -> web.Response:
        self.check(request)
        project = check_project_name(request.match_info["name"])
        version = await self.store.delete(project, request.match_info["version"])
        log.info("project_version_deleted", project=project, version=version.id)
        return web.json_response({"project": project, "deleted": version.id})

    async def set_default(self, request: web.Request) -> web.Response:
        self.check(request)
        project = check_project_name(request.match_info["name"])
        try:
            wanted = (await request.json()).get("version")
        except (ValueError, AttributeError):
            wanted = None
        if not isinstance(wanted, str) or not 0 < len(wanted) <= 64:
            raise ProjectRefused(400, "bad_request", 'send {"version": "<hash or label>"}')
        version = await self.store.set_default(project, wanted)
        return web.json_response({"project": project, "default": version.id})

    def add_routes(self, app: web.Application) -> None:
        app.router.add_get(PREFIX, self.listing)
        app.router.add_get(PREFIX + "/{name}", self.show)
        app.router.add_get(PREFIX + "/{name}/spiders", self.spiders)
        app.router.add_post(PREFIX + "/{name}", self.upload)
        app.router.add_put(PREFIX + "/{name}/default", self.set_default)
        app.router.add_delete(PREFIX + "/{name}/versions/{version}", self.delete)


def _detail(body: dict[str, Any]) -> dict[str, Any]:
    keys = ("project", "id", "label", "kind", "size", "spiders", "new")
    return {("version" if k == "id" else k): body[k] for k in keys}
