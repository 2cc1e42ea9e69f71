"""Project versions in ZooKeeper: the metadata and the archive itself, in chunks.

Layout, under a sibling of the engine root (``/netdiscovery.projects`` for
``/netdiscovery``)::

    <root>.projects/<name>                    {"default": hash or null}
    <root>.projects/<name>/archives/<hash>/0000 ... chunks of CHUNK bytes
    <root>.projects/<name>/versions/<hash>    the version's metadata (JSON), written last

A version exists when its ``versions`` node does: the chunks are written first, so a
half-written upload is never visible (at worst it leaves chunks without a version,
which the next upload of that project removes). Readers trust nothing they read: the
metadata is parsed with bounds, and the archive's sha256 must be its name.
Every node is created with the cluster's ACL (world may read, the digest identity may
change) when a digest is configured.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import re
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, TypeAlias

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError, NoNodeError, NotEmptyError
from kazoo.security import ACL

from netdisco.cluster.commands import check_commands
from netdisco.cluster.jobs import Job
from netdisco.cluster.zk import Bridge, wait_result
from netdisco.exceptions import ConfigError, ProjectRefused, ProjectUnavailable, SpiderNotAllowed
from netdisco.projects.archive import (
    LABEL,
    PROJECT_NAME,
    SPIDER_REF,
    Manifest,
    check_project_name,
)
from netdisco.projects.commands import project_command
from netdisco.values import NAME

#: bytes per chunk znode: well under ZooKeeper's default 1 MB ``jute.maxbuffer``
CHUNK = 256 * 1024
#: what a reader accepts whatever a version node claims (the monitor's cap is lower)
HARD_MAX_SIZE = 64 * 1024 * 1024
#: chunks without a version older than this are a failed upload, removed on the next one
ORPHAN_AGE = 3600.0
_HASH = re.compile(r"[0-9a-f]{64}")
WHEEL_FILENAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,199}\.whl")
_MAX_META = 64 * 1024

#: what the functions of this package accept: a kazoo client or the cluster's bridge
ZooKeeper: TypeAlias = KazooClient | Bridge


def client_of(zk: ZooKeeper) -> KazooClient:
    """The kazoo client behind either a client or the cluster's :class:`Bridge`."""
    return zk.client if isinstance(zk, Bridge) else zk


def projects_root(root: str) -> str:
    """Where projects live: a sibling of the engine root, like the tombstones."""
    return f"{root.rstrip('/')}.projects"


def content_hash(data: bytes) -> str:
    """A version's id: the sha256 of the archive as stored."""
    return hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class Version:
    """One immutable version of a project, as its version node describes it."""

    id: str  # the content hash
    size: int
    chunks: int
    kind: str  # "directory" or "wheel"
    spiders: tuple[str, ...]
    label: str | None = None
    filename: str | None = None  # a wheel's file name (uv needs it)
    created: float = 0.0
    czxid: int = 0  # ZooKeeper's creation order: the newest is the default
    #: "module:Class" -> the spider's ``name``, for every spider (read from the source)
    names: Mapping[str, str] = field(default_factory=dict)
    #: name -> argv of the commands it declares as jobs ([tool.netdisco.commands])
    commands: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        body = asdict(self)
        body.pop("czxid")
        body["spiders"] = list(self.spiders)
        body["names"] = dict(self.names)
        body["commands"] = {name: list(argv) for name, argv in self.commands.items()}
        return body


def default_names(spiders: tuple[str, ...]) -> dict[str, str]:
    """What a version stored before names were read holds: each class name in lower case
    (:class:`netdisco.Spider`'s fallback)."""
    return {ref: ref.rpartition(":")[2].lower() for ref in spiders}


def listing(names: Mapping[str, str]) -> str:
    """``name (module:Class), ...``: a project's spiders as an error lists them."""
    return ", ".join(f"{name} ({ref})" for ref, name in sorted(names.items(), key=lambda x: x[1]))


def project_spider(spider: str, names: Mapping[str, str], where: str = "the project") -> str:
    """The ``module:Class`` of a project's spider named by ``module:Class`` (a value with a
    colon) or by its ``name`` (or, as before names, its class name alone); the engine runs
    it, the monitor checks a job's or a schedule's with it."""
    if ":" in spider:
        found = [spider] if spider in names else []
    else:
        found = [ref for ref, name in names.items() if name == spider]
        found = found or [ref for ref in names if ref.rpartition(":")[2] == spider]
    if len(found) == 1:
        return found[0]
    raise SpiderNotAllowed(
        f"{where} has no spider {spider!r}; its spiders: {listing(names)}"
        if not found
        else f"{where} has several spiders named {spider!r}: {', '.join(sorted(found))}"
    )


def _names(raw: Any, spiders: tuple[str, ...]) -> dict[str, str] | None:
    """A version node's ``names``, checked (one per spider, each a name); None if wrong."""
    if raw is None:
        return default_names(spiders)
    if not isinstance(raw, dict) or set(raw) != set(spiders):
        return None
    good = all(isinstance(v, str) and NAME.fullmatch(v) and ".." not in v for v in raw.values())
    return dict(raw) if good else None


async def check_spider(store: ProjectStore, project: str, request: Mapping[str, Any]) -> str:
    """The ``module:Class`` a job request's ``spider`` names in its project's version (the
    one asked, or the default), so a request that would fail is refused when made; else a
    ``ConfigError`` naming the field."""
    version = await _requested(store, project, request)
    try:
        return project_spider(str(request.get("spider")), version.names)
    except SpiderNotAllowed as exc:
        raise ConfigError("spider", str(exc)) from None


async def check_request(store: ProjectStore, project: str, job: Job) -> None:
    """A job of a project refused now when its spider or command is not its version's."""
    request = {"spider": job.spider, "command": job.spider, "version": job.version}
    if job.kind == "command":
        await check_command(store, project, request)
    else:
        await check_spider(store, project, request)


async def check_command(store: ProjectStore, project: str, request: Mapping[str, Any]) -> None:
    """A job request's ``command`` must be one its project's version declares (the one
    asked, or the default); else a ``ConfigError`` naming them."""
    version = await _requested(store, project, request)
    project_command(project, str(request.get("command")), version.commands)


async def _requested(store: ProjectStore, project: str, request: Mapping[str, Any]) -> Version:
    """The version a request names in ``project`` (or the default); ``ConfigError`` if none."""
    try:
        check_project_name(project)
    except ProjectRefused as exc:
        raise ConfigError("project", exc.message) from None
    if not await store.versions(project):
        raise ConfigError("project", f"no project {project!r} is deployed")
    try:
        return await store.resolve(project, request.get("version"))
    except ProjectRefused as exc:
        raise ConfigError("version", exc.message) from None


def _bad(path: str, why: str) -> ProjectUnavailable:
    return ProjectUnavailable(f"{path}: {why}")


def parse_version(path: str, name: str, raw: bytes, czxid: int) -> Version:
    """A version node's data, validated: anyone who may write in ZooKeeper could have."""
    if not _HASH.fullmatch(name) or len(raw) > _MAX_META:
        raise _bad(path, "not a version node")
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError):
        raise _bad(path, "not JSON") from None
    if not isinstance(body, dict):
        raise _bad(path, "not a JSON object")
    size, chunks, spiders = body.get("size"), body.get("chunks"), body.get("spiders")
    label, filename, kind = body.get("label"), body.get("filename"), body.get("kind")
    if not (
        type(size) is int
        and 0 < size <= HARD_MAX_SIZE
        and type(chunks) is int
        and chunks == -(-size // CHUNK)
        and isinstance(spiders, list)
        and (len(spiders) > 0 or body.get("commands"))
        and len(spiders) <= 1000
        and all(isinstance(s, str) and SPIDER_REF.fullmatch(s) for s in spiders)
        and (label is None or (isinstance(label, str) and LABEL.fullmatch(label) is not None))
        and kind in ("directory", "wheel")
        and (filename is None or (isinstance(filename, str) and WHEEL_FILENAME.fullmatch(filename)))
        and (kind != "wheel" or filename is not None)
    ):
        raise _bad(path, "version metadata out of bounds")
    names = _names(body.get("names"), tuple(spiders))
    if names is None:
        raise _bad(path, "spider names out of bounds")
    try:
        commands = check_commands(body.get("commands") or {})
    except ConfigError as exc:
        raise _bad(path, str(exc)) from None
    stamp = body.get("created")
    created = float(stamp) if isinstance(stamp, int | float) and math.isfinite(stamp) else 0.0
    meta = (str(kind), tuple(spiders), label, filename, created, czxid, names, commands)
    return Version(name, size, chunks, *meta)


class ProjectStore:
    """Reads and writes the projects of one cluster root (every call awaited on the loop)."""

    def __init__(self, zk: ZooKeeper, root: str, acl: list[ACL] | None = None) -> None:
        self.client = client_of(zk)
        self.base = projects_root(root)
        self.acl = acl

    def _path(self, project: str, *rest: str) -> str:
        if not PROJECT_NAME.fullmatch(project):
            raise ProjectRefused(400, "bad_project_name", f"not a project name: {project!r}")
        return "/".join((self.base, project, *rest))

    async def _ensure(self, path: str) -> None:
        await wait_result(self.client.ensure_path_async(path, acl=self.acl))

    async def projects(self) -> list[str]:
        """The names of every project (checked: a stray node is not a project)."""
        try:
            names = await wait_result(self.client.get_children_async(self.base))
        except NoNodeError:
            return []
        return sorted(n for n in names if PROJECT_NAME.fullmatch(n))

    async def versions(self, project: str) -> list[Version]:
        """The project's versions, oldest first; a damaged node is skipped."""
        path = self._path(project, "versions")
        try:
            names = await wait_result(self.client.get_children_async(path))
        except NoNodeError:
            return []
        found = []
        for name in names:
            try:
                raw, stat = await wait_result(self.client.get_async(f"{path}/{name}"))
                found.append(parse_version(f"{path}/{name}", name, raw, stat.czxid))
            except (NoNodeError, ProjectUnavailable):
                continue
        return sorted(found, key=lambda v: v.czxid)

    async def default(self, project: str) -> str | None:
        """The version set as default, if any (the newest is used otherwise)."""
        try:
            raw, _ = await wait_result(self.client.get_async(self._path(project)))
            value = json.loads(raw or b"{}").get("default")
        except (NoNodeError, ValueError, AttributeError, RecursionError):
            return None
        return value if isinstance(value, str) and _HASH.fullmatch(value) else None

    async def describe(self, project: str) -> dict[str, Any]:
        """The project as the HTTP API shows it: versions, the default and what it is."""
        versions = await self.versions(project)
        if not versions and not await wait_result(self.client.exists_async(self._path(project))):
            raise ProjectRefused(404, "unknown_project", f"no project {project!r}")
        chosen = pick(versions, await self.default(project))
        return {
            "project": project,
            "default": chosen.id if chosen else None,
            "default_set": await self.default(project),
            "versions": [v.to_json() for v in versions],
        }

    async def resolve(self, project: str, version: str | None) -> Version:
        """``version`` (a hash, a unique prefix of 8+ or a label), or the default one."""
        versions = await self.versions(project)
        if version is None:
            chosen = pick(versions, await self.default(project))
        else:
            chosen = match(versions, version)
        if chosen is None:
            wanted = "a default version" if version is None else f"version {version!r}"
            raise ProjectRefused(404, "unknown_version", f"project {project!r} has no {wanted}")
        return chosen

    async def put(
        self,
        project: str,
        data: bytes,
        manifest: Manifest,
        label: str | None,
        filename: str | None = None,
    ) -> tuple[Version, bool]:
        """Store a checked archive; (the version, whether it is new). Chunks first, the
        version node last, so that no reader ever sees half a version."""
        digest = content_hash(data)
        chunks = -(-len(data) // CHUNK)
        names = manifest.names or default_names(manifest.spiders)
        meta = (manifest.kind, manifest.spiders, label, filename, time.time())
        version = Version(digest, len(data), chunks, *meta, names=names, commands=manifest.commands)
        existing = {v.id: v for v in await self.versions(project)}
        if digest in existing:
            return existing[digest], False
        await self._ensure(self._path(project, "versions"))
        await self.sweep_orphans(project, keep=digest)
        archive = self._path(project, "archives", digest)
        await self._ensure(archive)
        for index in range(chunks):
            piece = data[index * CHUNK : (index + 1) * CHUNK]
            try:
                await wait_result(
                    self.client.create_async(f"{archive}/{index:04d}", piece, self.acl)
                )
            except NodeExistsError:
                await wait_result(self.client.set_async(f"{archive}/{index:04d}", piece))
        body = json.dumps(version.to_json()).encode()
        try:
            await wait_result(
                self.client.create_async(self._path(project, "versions", digest), body, self.acl)
            )
        except NodeExistsError:
            return await self.resolve(project, digest), False
        return await self.resolve(project, digest), True

    async def read(self, project: str, version: str | None) -> tuple[Version, bytes]:
        """A version and its archive, checked against its hash (ZooKeeper only)."""
        chosen = await self.resolve(project, version)
        archive = self._path(project, "archives", chosen.id)
        pieces = []
        for index in range(chosen.chunks):
            try:
                raw, _ = await wait_result(self.client.get_async(f"{archive}/{index:04d}"))
            except NoNodeError:
                raise _bad(archive, f"chunk {index} is missing") from None
            pieces.append(raw or b"")
        data = b"".join(pieces)
        if len(data) != chosen.size or content_hash(data) != chosen.id:
            raise _bad(archive, "the archive does not match its hash")
        return chosen, data

    async def set_default(self, project: str, version: str) -> Version:
        """Make a version the default (it must exist)."""
        chosen = match(await self.versions(project), version)
        if chosen is None:
            raise ProjectRefused(404, "unknown_version", f"project {project!r} has no {version!r}")
        body = json.dumps({"default": chosen.id}).encode()
        await wait_result(self.client.set_async(self._path(project), body))
        return chosen

    async def delete(self, project: str, version: str) -> Version:
        """Delete a version: its node first (it is gone for readers), then its chunks."""
        chosen = next((v for v in await self.versions(project) if v.id == version), None)
        if chosen is None:
            raise ProjectRefused(404, "unknown_version", f"project {project!r} has no {version!r}")
        with contextlib.suppress(NoNodeError):
            await wait_result(self.client.delete_async(self._path(project, "versions", chosen.id)))
        if await self.default(project) == chosen.id:
            await wait_result(self.client.set_async(self._path(project), b"{}"))
        await self._delete_archive(project, chosen.id)
        return chosen

    async def delete_project(self, project: str) -> list[Version]:
        """Delete every version of a project, then the project itself (404 if unknown)."""
        if not await wait_result(self.client.exists_async(self._path(project))):
            raise ProjectRefused(404, "unknown_project", f"no project {project!r}")
        deleted = [await self.delete(project, v.id) for v in await self.versions(project)]
        with contextlib.suppress(NoNodeError, NotEmptyError):
            for rest in (("versions",), ("archives",), ()):
                await wait_result(self.client.delete_async(self._path(project, *rest)))
        return deleted

    async def _delete_archive(self, project: str, digest: str) -> None:
        archive = self._path(project, "archives", digest)
        try:
            names = await wait_result(self.client.get_children_async(archive))
        except NoNodeError:
            return
        for name in names:
            try:
                await wait_result(self.client.delete_async(f"{archive}/{name}"))
            except NoNodeError:
                continue
        with contextlib.suppress(NoNodeError, NotEmptyError):
            await wait_result(self.client.delete_async(archive))

    async def sweep_orphans(self, project: str, keep: str) -> int:
        """Delete chunks that have had no version for ``ORPHAN_AGE`` (failed uploads)."""
        try:
            names = await wait_result(
                self.client.get_children_async(self._path(project, "archives"))
            )
        except NoNodeError:
            return 0
        live = {v.id for v in await self.versions(project)} | {keep}
        swept = 0
        for name in set(names) - live:
            stat = await wait_result(
                self.client.exists_async(self._path(project, "archives", name))
            )
            if stat is not None and time.time() - stat.ctime / 1000 > ORPHAN_AGE:
                await self._delete_archive(project, name)
                swept += 1
        return swept


def pick(versions: list[Version], default: str | None) -> Version | None:
    """The default version: the one set, or the newest (by ZooKeeper's creation order)."""
    chosen = next((v for v in versions if v.id == default), None)
    return chosen or (versions[-1] if versions else None)


def match(versions: list[Version], wanted: str) -> Version | None:
    """The version a user named: its hash, a unique hash prefix of 8 or more, or its label
    (the newest of that label)."""
    exact = [v for v in versions if v.id == wanted]
    if exact:
        return exact[0]
    if len(wanted) >= 8:
        prefixed = [v for v in versions if v.id.startswith(wanted)]
        if len(prefixed) == 1:
            return prefixed[0]
    labelled = [v for v in versions if v.label == wanted]
    return labelled[-1] if labelled else None
