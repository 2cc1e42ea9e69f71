"""One virtual environment per project version, built by uv on the engine.

``cache_dir/<project>/<hash>/`` holds the unpacked archive (``src/``, put first on a
job's ``sys.path``), the environment (``venv/``) and ``installed.json``, written last:
a directory without it is a build that did not finish, rebuilt on the next install.
A file lock (``<hash>.lock``, ``flock``) makes two installs of one version, in one
process or in two, build it once; the second waits and finds it done.

The environment runs the engine's own netdisco at exactly the engine's version: an
editable (source tree) engine is linked with a ``.pth`` file to that tree; an installed
one is repacked once into a wheel from its own files (``cache_dir/engine/``). The
engine's dependencies are pinned to the versions the engine runs (a constraints file),
the project's declared ones are resolved beside them, bundled ``wheels/`` first.
Only ZooKeeper is read: the monitor may be down.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
import shutil
import sys
import time
import zipfile
from collections.abc import AsyncIterator, Mapping
from dataclasses import asdict, dataclass, field, replace
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from netdisco.exceptions import ProjectUnavailable
from netdisco.projects import archive
from netdisco.projects.commands import make_executable
from netdisco.projects.store import ProjectStore, Version, ZooKeeper

DISTRIBUTION = "netdiscovery"
#: the source tree of the running netdisco (netdisco/projects/install.py -> the tree)
SOURCE_TREE = Path(__file__).resolve().parents[2]
MARKER = "installed.json"
_OUTPUT_TAIL = 4000
#: what a Scrapy project's requirements name that its jobs never install
SCRAPY_ITSELF = frozenset({"scrapy", "scrapyd", "scrapyd-client"})


@dataclass(frozen=True)
class InstalledProject:
    """A project version ready to run: its interpreter and the root for ``sys.path``."""

    project: str
    version: str  # the content hash
    python: Path  # the venv's interpreter
    path: Path  # the unpacked project root: first on a job's sys.path
    spiders: tuple[str, ...]  # "module:Class"
    #: "module:Class" -> the spider's ``name``, as the version node holds them
    names: Mapping[str, str] = field(default_factory=dict)
    #: name -> argv of the commands the version declares as jobs
    commands: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    @property
    def venv(self) -> Path:
        """The version's virtual environment (its ``bin`` goes first on a command's PATH)."""
        return self.python.parent.parent


async def install(
    zk: ZooKeeper,
    root: str,
    project: str,
    version: str | None,
    cache_dir: Path,
    *,
    offline: bool = False,
    timeout: float = 900.0,
) -> InstalledProject:
    """Install ``project`` at ``version`` (None: the default), or find it installed.

    Raises ``ProjectRefused`` (404) for an unknown project or version and
    ``ProjectUnavailable`` when the archive is damaged or the build fails.
    ``offline``: uv may use its cache and the bundled wheels only.
    """
    store = ProjectStore(zk, root)
    chosen = await store.resolve(project, version)
    home = cache_dir / project / chosen.id
    if (found := _installed(home)) is None:
        async with _file_lock(cache_dir / project / f"{chosen.id}.lock"):
            if (found := _installed(home)) is None:
                _, data = await store.read(project, chosen.id)
                found = await _build(home, project, chosen, data, offline, timeout)
    (home / "used").touch()
    return replace(found, names=dict(chosen.names), commands=dict(chosen.commands))


def _installed(home: Path) -> InstalledProject | None:
    try:
        body = json.loads((home / MARKER).read_text("utf-8"))
        return InstalledProject(
            body["project"],
            body["version"],
            Path(body["python"]),
            Path(body["path"]),
            tuple(body["spiders"]),
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


@contextlib.asynccontextmanager
async def _file_lock(path: Path) -> AsyncIterator[None]:
    """An exclusive ``flock``, polled so that waiting stays cancellable on the loop."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                await asyncio.sleep(0.05)
        yield
    finally:
        os.close(fd)  # releases the lock


async def _build(
    home: Path, project: str, version: Version, data: bytes, offline: bool, timeout: float
) -> InstalledProject:
    shutil.rmtree(home, ignore_errors=True)  # an unfinished build, under our lock
    source, venv = home / "src", home / "venv"
    await asyncio.to_thread(archive.unpack, data, source, len(data))
    make_executable(source, version.commands)
    engine = engine_link(home.parent.parent)
    wanted = [*_project_requirements(source, version, home, data), *engine.requirements]
    (home / "requirements.txt").write_text("\n".join(wanted) + "\n", "utf-8")
    (home / "constraints.txt").write_text("\n".join(engine_pins()) + "\n", "utf-8")
    uv = _uv()
    await _run(
        [uv, "venv", "--quiet", "--no-config", "--python", sys.executable, str(venv)],
        home, timeout, "creating the virtual environment",
    )  # fmt: skip
    python = venv / "bin" / "python"
    await _run(_pip_install(uv, python, source, offline), home, timeout, "installing")
    if engine.tree is not None:
        _site_packages(python).joinpath("_netdisco_engine.pth").write_text(f"{engine.tree}\n")
    await _run([str(python), "-c", "import netdisco"], home, timeout, "importing netdisco")
    found = InstalledProject(project, version.id, python, source, version.spiders)
    (home / "used").touch()
    _write_marker(home, found)
    return found


def _pip_install(uv: str, python: Path, source: Path, offline: bool) -> list[str]:
    """uv's one resolution of the project's and the engine's requirements."""
    command = [uv, "pip", "install", "--quiet", "--no-config", "--python", str(python),
               "-r", "requirements.txt", "-c", "constraints.txt"]  # fmt: skip
    if (source / "wheels").is_dir():
        command += ["--find-links", str(source / "wheels")]
    if offline:
        command.append("--offline")
    return command


def _write_marker(home: Path, found: InstalledProject) -> None:
    body = asdict(found) | {
        "python": str(found.python),
        "path": str(found.path),
        "spiders": list(found.spiders),
        "names": dict(found.names),
        "installed_at": time.time(),
    }
    partial = home / f"{MARKER}.partial"
    partial.write_text(json.dumps(body), "utf-8")
    partial.replace(home / MARKER)


def _project_requirements(source: Path, version: Version, home: Path, data: bytes) -> list[str]:
    if version.kind == "wheel":
        assert version.filename is not None  # parse_version insists
        wheel = home / version.filename
        wheel.write_bytes(data)
        return [str(wheel)]

    def read(name: str) -> bytes | None:
        path = source / name
        return path.read_bytes() if path.is_file() else None

    wanted = archive.requirements(read("pyproject.toml"), read("requirements.txt"))
    if not (source / "scrapy.cfg").is_file():
        return list(wanted)
    # a Scrapy project's ``import scrapy`` is netdisco's (its job maps it): never installed
    return [r for r in wanted if canonicalize_name(Requirement(r).name) not in SCRAPY_ITSELF]


def _site_packages(python: Path) -> Path:
    lib = python.parent.parent / "lib"
    found = sorted(lib.glob("python3*/site-packages"))
    if not found:
        raise ProjectUnavailable(f"{lib}: the virtual environment has no site-packages")
    return found[0]


def _uv() -> str:
    try:
        import uv  # the optional extra "projects"
    except ImportError:
        raise ProjectUnavailable(
            "installing projects needs uv: pip install 'netdiscovery[projects]'"
        ) from None
    return str(uv.find_uv_bin())


async def _run(command: list[str], cwd: Path, timeout: float, what: str) -> None:
    """Run one step; its output only when it fails (the tail, in the error)."""
    process = await asyncio.create_subprocess_exec(
        *command,
        cwd=cwd,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    try:
        output, _ = await asyncio.wait_for(process.communicate(), timeout)
    except BaseException:  # a timeout or a cancellation: the child goes with us
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        await process.wait()
        raise
    if process.returncode:
        tail = output.decode("utf-8", "replace")[-_OUTPUT_TAIL:]
        raise ProjectUnavailable(f"{what} failed (exit {process.returncode}): {tail}")


# --- the engine's own netdisco --------------------------------------------------------------


@dataclass(frozen=True)
class EngineLink:
    """How a venv gets the engine's netdisco: what to install, and a tree to link."""

    requirements: tuple[str, ...]
    tree: Path | None  # an editable engine's source tree (a .pth file points at it)


def _distribution() -> metadata.Distribution | None:
    try:
        return metadata.distribution(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return None


def _editable_tree() -> Path | None:
    """The source tree netdisco runs from (an editable install, or a checkout on the
    path); None when it runs from an installed copy in site-packages."""
    return None if SOURCE_TREE.name in ("site-packages", "dist-packages") else SOURCE_TREE


def _base_requirements(dist: metadata.Distribution | None) -> list[str]:
    """netdisco's own requirements without extras (those whose markers hold here)."""
    found = []
    for line in (dist.requires or []) if dist else []:
        requirement = Requirement(line)
        if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
            found.append(str(requirement))
    return found


def engine_link(cache_dir: Path) -> EngineLink:
    """The engine's netdisco for a venv: its tree (editable) or its repacked wheel."""
    dist = _distribution()
    tree = _editable_tree()
    if tree is not None or dist is None:
        return EngineLink(tuple(_base_requirements(dist)), tree)
    return EngineLink((str(engine_wheel(dist, cache_dir / "engine")),), None)


def engine_pins() -> list[str]:
    """``name==version`` of each of netdisco's requirements as the engine runs them."""
    pins = []
    for line in _base_requirements(_distribution()):
        name = Requirement(line).name
        with contextlib.suppress(metadata.PackageNotFoundError):
            pins.append(f"{name}=={metadata.version(name)}")
    return pins


def engine_wheel(dist: metadata.Distribution, directory: Path) -> Path:
    """A wheel of the installed netdisco, made once from its own files (no build)."""
    target = directory / f"netdiscovery-{dist.version}-py3-none-any.whl"
    if target.is_file():
        return target
    directory.mkdir(parents=True, exist_ok=True)
    site = Path(str(dist.locate_file("")))
    partial = directory / f".{target.name}.{os.getpid()}.partial"
    skipped = {"INSTALLER", "REQUESTED", "direct_url.json", "RECORD"}
    with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as wheel:
        for file in dist.files or ():
            if file.parts[0] == ".." or "__pycache__" in file.parts or file.name in skipped:
                continue
            wheel.write(site / file, file.as_posix())
        info = next(f for f in dist.files or () if f.name == "METADATA").parent.as_posix()
        wheel.writestr(f"{info}/RECORD", "")
    partial.replace(target)
    return target


# --- garbage collection ---------------------------------------------------------------------


async def collect_garbage(zk: ZooKeeper, root: str, cache_dir: Path, unused_days: float) -> int:
    """Delete the venvs of versions gone from ZooKeeper or unused for ``unused_days``.

    A version being installed (its lock held) is skipped. Returns how many went.
    """
    store = ProjectStore(zk, root)
    live = {(p, v.id) for p in await store.projects() for v in await store.versions(p)}
    cutoff = time.time() - unused_days * 86400
    return await asyncio.to_thread(_sweep_cache, cache_dir, live, cutoff)


def _sweep_cache(cache_dir: Path, live: set[tuple[str, str]], cutoff: float) -> int:
    removed = 0
    for home in sorted(cache_dir.glob("*/*")):
        if not home.is_dir() or home.parent.name == "engine":
            continue
        used = home / "used"
        stale = not used.exists() or used.stat().st_mtime < cutoff
        if (home.parent.name, home.name) in live and not stale:
            continue
        if _remove_unlocked(home, cache_dir / home.parent.name / f"{home.name}.lock"):
            removed += 1
    return removed


def _remove_unlocked(home: Path, lock: Path) -> bool:
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return False
    try:
        shutil.rmtree(home, ignore_errors=True)
        return True
    finally:
        os.close(fd)
