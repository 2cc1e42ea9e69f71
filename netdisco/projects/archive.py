"""Project archives: packed from a directory, checked before storing, unpacked safely.

An archive is a zip (a directory project, packed by :func:`pack`, or a built wheel).
Everything in it is untrusted until :func:`inspect` passed it: member names (no
traversal, absolute paths, drive letters, backslashes, duplicates), member types (no
symlinks or devices, read from the zip's external attributes), sizes (stored,
unpacked and the ratio of each member, against zip bombs) and a project file. The
spiders are found by reading the source (:mod:`ast`), never by importing it: the
monitor does not run a project's code.
"""

from __future__ import annotations

import ast
import configparser
import io
import re
import stat
import zipfile
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from packaging.requirements import InvalidRequirement, Requirement

from netdisco.exceptions import ProjectRefused
from netdisco.projects.commands import declared_commands, read_pyproject
from netdisco.values import NAME

#: one strict pattern for project names: they are znode names and directory names
PROJECT_NAME = re.compile(r"[a-z][a-z0-9_-]{0,63}")
#: a version's optional label (the id is the content hash)
LABEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,63}")
#: the base classes whose subclasses are spiders
SPIDER_BASES = frozenset({"Spider", "CrawlSpider", "SitemapSpider"})

MAX_MEMBERS = 10_000
#: unpacked bytes allowed per stored byte of the cap, and the ratio of one member
UNPACKED_FACTOR = 8
MAX_RATIO = 200
#: a member whose ratio is not checked: too small to be a bomb
RATIO_FLOOR = 1 << 20
#: what a single source file read for spiders may be
MAX_SOURCE = 1 << 20
#: never packed from a directory
SKIPPED = frozenset(
    {
        ".git",
        ".hg",
        ".svn",
        "__pycache__",
        ".venv",
        "venv",
        ".mypy_cache",
        ".pytest_cache",
        ".ruff_cache",
        ".tox",
        "node_modules",
        "dist",
        "build",
    }
)
#: the files at an archive's top that make it a directory project (scrapy.cfg: Scrapy's)
PROJECT_FILES = ("scrapy.cfg", "pyproject.toml", "requirements.txt")
#: a module's file name: an identifier, or with '-' as Scrapy's spider packages have them
#: (``toscrape-css.py``: ``walk_packages`` finds it, ``import_module`` imports it)
_MODULE_FILE = re.compile(r"[A-Za-z_][\w-]{0,99}")
#: a spider's reference, ``module:Class`` (the module's last part may have '-', as above)
SPIDER_REF = re.compile(r"[A-Za-z_][\w.-]{0,199}:[A-Za-z_]\w{0,99}")
#: what Scrapyd reads an egg's settings module from
EGG_ENTRY_POINTS = "EGG-INFO/entry_points.txt"
SETTINGS_MODULE = re.compile(r"[A-Za-z_]\w{0,99}(\.[A-Za-z_]\w{0,99}){0,9}")
_DRIVE = re.compile(r"^[A-Za-z]:")
_FIXED_TIME = (1980, 1, 1, 0, 0, 0)


@dataclass(frozen=True)
class Manifest:
    """What :func:`inspect` found in an archive that passed."""

    kind: str  # "directory" or "wheel"
    spiders: tuple[str, ...]  # "module:Class"
    unpacked_size: int
    members: int
    names: Mapping[str, str] = field(default_factory=dict)  # "module:Class" -> its ``name``
    #: the commands it declares as jobs: name -> argv ([tool.netdisco.commands])
    commands: Mapping[str, tuple[str, ...]] = field(default_factory=dict)


def refuse(status: int, code: str, message: str) -> ProjectRefused:
    """The one way this package refuses: status, machine code, sentence."""
    return ProjectRefused(status, code, message)


def check_project_name(name: str) -> str:
    """``name`` if ``PROJECT_NAME`` matches it, else a 400."""
    if not PROJECT_NAME.fullmatch(name):
        raise refuse(
            400,
            "bad_project_name",
            f"a project name is 1-64 of a-z, 0-9, '_' and '-', starting with a letter: {name!r}",
        )
    return name


def check_label(label: str | None) -> str | None:
    """``label`` if it is None or matches ``LABEL``, else a 400."""
    if label is not None and not LABEL.fullmatch(label):
        raise refuse(
            400, "bad_version_label", f"a version label is 1-64 of A-Z a-z 0-9 . _ + -: {label!r}"
        )
    return label


def default_name(raw: str) -> str:
    """A project name made of a directory or distribution name: ``My.Project``, ``my-project``."""
    return re.sub(r"[^a-z0-9_-]+", "-", raw.lower()).strip("-_") or "project"


# --- packing -------------------------------------------------------------------------------


def _walk(directory: Path) -> Iterator[Path]:
    for path in sorted(directory.iterdir()):
        if path.name in SKIPPED or path.suffix in (".pyc", ".pyo"):
            continue
        if path.is_symlink():
            raise refuse(400, "symlink", f"{path} is a symbolic link: copy the file instead")
        if path.is_dir():
            yield from _walk(path)
        elif path.is_file():
            yield path


def pack(directory: Path) -> bytes:
    """A deterministic zip of ``directory`` (sorted, fixed times and modes): the same
    files give the same bytes, hence the same version hash."""
    if not any((directory / name).is_file() for name in PROJECT_FILES):
        raise refuse(
            400,
            "no_project_file",
            f"{directory} is not a project: deploy the directory that holds scrapy.cfg (a "
            "Scrapy project) or pyproject.toml, or add a requirements.txt (one requirement a "
            "line, or empty) beside the spiders' modules",
        )
    return _zip(
        (path.relative_to(directory).as_posix(), path.read_bytes()) for path in _walk(directory)
    )


def _zip(files: Iterable[tuple[str, bytes]]) -> bytes:
    """A zip of (name, bytes) in the order given, with fixed times and modes."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in files:
            info = zipfile.ZipInfo(name, _FIXED_TIME)
            info.external_attr = (stat.S_IFREG | 0o644) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, data)
    return buffer.getvalue()


def from_egg(data: bytes, max_size: int) -> bytes:
    """A Scrapyd egg (what ``scrapyd-deploy`` uploads) as a directory project: its files
    but ``EGG-INFO/`` and compiled ones, and a scrapy.cfg naming the settings module that
    its ``entry_points.txt`` declares (as Scrapyd reads it). The egg is checked as
    :func:`inspect` checks any upload before a member is read; the result is inspected
    again by the caller."""
    if len(data) > max_size:
        raise refuse(413, "too_large", f"the egg is {len(data)} bytes, over the cap of {max_size}")
    with _open(data) as egg:
        infos = _checked_members(egg, max_size)
        entry = next((i for i in infos if i.filename == EGG_ENTRY_POINTS), None)
        if entry is None:
            raise refuse(400, "not_an_egg", f"the egg has no {EGG_ENTRY_POINTS}: build it "
                         "with scrapyd-deploy, beside the project's scrapy.cfg")  # fmt: skip
        settings = egg_settings(read_member(egg, entry, MAX_SOURCE))
        files = [
            (i.filename, read_member(egg, i, UNPACKED_FACTOR * max_size))
            for i in infos
            if not i.is_dir() and _kept_from_egg(PurePosixPath(i.filename))
        ]
    return _zip([*sorted(files), ("scrapy.cfg", f"[settings]\ndefault = {settings}\n".encode())])


def _kept_from_egg(path: PurePosixPath) -> bool:
    skipped = path.parts[0] == "EGG-INFO" or str(path) in PROJECT_FILES
    return not skipped and path.suffix not in (".pyc", ".pyo") and "__pycache__" not in path.parts


def egg_settings(entry_points: bytes) -> str:
    """The settings module of an egg's ``entry_points.txt`` (``[scrapy] settings = ...``),
    checked as a dotted module name."""
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read_string(entry_points.decode("utf-8"))
    except (UnicodeDecodeError, configparser.Error) as exc:
        raise refuse(400, "not_an_egg", f"{EGG_ENTRY_POINTS} cannot be read: {exc}") from None
    module = parser.get("scrapy", "settings", fallback="").strip()
    if not SETTINGS_MODULE.fullmatch(module):
        raise refuse(400, "not_an_egg", f"{EGG_ENTRY_POINTS} names no settings module under "
                     f"[scrapy] settings (got {module[:80]!r}): scrapyd-deploy writes it from "
                     "scrapy.cfg's [settings] default")  # fmt: skip
    return module


# --- checking -------------------------------------------------------------------------------


def _open(data: bytes) -> zipfile.ZipFile:
    try:
        return zipfile.ZipFile(io.BytesIO(data))
    except (zipfile.BadZipFile, ValueError, OSError, EOFError):
        raise refuse(400, "not_a_zip", "the archive is not a zip file (nor a wheel)") from None


def member_path(name: str) -> PurePosixPath:
    """The relative path a member name stands for, or a 400 if it could leave its directory."""
    if (
        not name
        or "\\" in name
        or "\x00" in name
        or name.startswith("/")
        or _DRIVE.match(name)
        or any(ord(c) < 32 for c in name)
    ):
        raise refuse(400, "bad_member_name", f"archive member {name!r} is not a relative path")
    parts = PurePosixPath(name).parts
    if not parts or any(p in ("..", ".") for p in name.rstrip("/").split("/")):
        raise refuse(400, "path_traversal", f"archive member {name!r} leaves the project directory")
    return PurePosixPath(*parts)


def _check_member(info: zipfile.ZipInfo) -> None:
    mode = info.external_attr >> 16
    file_type = stat.S_IFMT(mode)
    if file_type and file_type not in (stat.S_IFREG, stat.S_IFDIR):
        kind = "a symbolic link" if stat.S_ISLNK(mode) else "not a regular file"
        raise refuse(
            400,
            "symlink" if stat.S_ISLNK(mode) else "bad_member_type",
            f"archive member {info.filename!r} is {kind}",
        )
    if info.flag_bits & 0x1:
        raise refuse(400, "encrypted", f"archive member {info.filename!r} is encrypted")
    if info.file_size > RATIO_FLOOR and info.file_size > MAX_RATIO * max(info.compress_size, 1):
        raise refuse(
            413, "zip_bomb", f"archive member {info.filename!r} expands more than {MAX_RATIO}x"
        )


def _checked_members(archive: zipfile.ZipFile, max_size: int) -> list[zipfile.ZipInfo]:
    infos = archive.infolist()
    if len(infos) > MAX_MEMBERS:
        raise refuse(413, "too_many_members", f"the archive has more than {MAX_MEMBERS} members")
    seen: set[PurePosixPath] = set()
    unpacked = 0
    for info in infos:
        path = member_path(info.filename)
        if path in seen:
            raise refuse(400, "duplicate_member", f"archive member {info.filename!r} appears twice")
        seen.add(path)
        _check_member(info)
        unpacked += info.file_size
    if unpacked > UNPACKED_FACTOR * max_size:
        raise refuse(
            413,
            "zip_bomb",
            f"the archive unpacks to {unpacked} bytes, over {UNPACKED_FACTOR * max_size}",
        )
    return infos


def read_member(archive: zipfile.ZipFile, info: zipfile.ZipInfo, limit: int) -> bytes:
    """A member's bytes, never more than ``limit`` nor more than its header declared
    (a lying header is a refused archive, not a bigger read)."""
    bound = min(limit, info.file_size)
    try:
        with archive.open(info) as source:
            data = source.read(bound + 1)
    except (zipfile.BadZipFile, OSError, EOFError, NotImplementedError, RuntimeError) as exc:
        raise refuse(400, "bad_member", f"archive member {info.filename!r}: {exc}") from None
    if len(data) > bound:
        raise refuse(413, "zip_bomb", f"archive member {info.filename!r} is larger than declared")
    return data


def _kind(names: set[str]) -> str:
    if any(n.count("/") == 1 and n.endswith(".dist-info/WHEEL") for n in names):
        return "wheel"
    if names & set(PROJECT_FILES):
        return "directory"
    raise refuse(
        400,
        "no_project_file",
        "the archive holds no scrapy.cfg, pyproject.toml or requirements.txt at its top, "
        "nor is a wheel: pack the project's directory (netdisco deploy DIR) or build a wheel",
    )


def inspect(data: bytes, max_size: int) -> Manifest:
    """Check an uploaded archive completely; a :class:`ProjectRefused` (4xx) if it fails."""
    if len(data) > max_size:
        raise refuse(
            413, "too_large", f"the archive is {len(data)} bytes, over the cap of {max_size}"
        )
    with _open(data) as archive:
        infos = _checked_members(archive, max_size)
        kind = _kind({i.filename for i in infos})
        sources = {
            i.filename: read_member(archive, i, MAX_SOURCE)
            for i in infos
            if (i.filename.endswith(".py") and not i.is_dir()) or i.filename in PROJECT_FILES
        }
    if kind == "directory":
        requirements(sources.get("pyproject.toml"), sources.get("requirements.txt"))
    spiders = declared_spiders(sources.get("pyproject.toml")) or find_spiders(sources)
    commands = declared_commands(sources.get("pyproject.toml"), {i.filename for i in infos})
    if not spiders and not commands:
        raise refuse(422, "no_spiders", _no_spiders("scrapy.cfg" in sources))
    names = unique_names(spider_names(sources, spiders))
    size = sum(i.file_size for i in infos)
    return Manifest(kind, spiders, size, len(infos), names, commands)


def _no_spiders(scrapy: bool) -> str:
    """What to do when no spider was found: said for the kind of project it is."""
    if scrapy:
        return (
            "no spider found in this Scrapy project: no class in its .py files derives from "
            "scrapy.Spider, CrawlSpider or SitemapSpider; put the spiders in the SPIDER_MODULES "
            "package that settings.py names (scrapy genspider writes them there), then deploy again"
        )
    return (
        "no spider found: no class in the archive's .py files derives from Spider, CrawlSpider "
        "or SitemapSpider; add a spider module, name the classes in pyproject.toml "
        '([tool.netdisco] spiders = ["module:Class"]), or declare commands '
        '([tool.netdisco.commands] name = ["./program", "arg"])'
    )


# --- spiders, statically --------------------------------------------------------------------


def declared_spiders(pyproject: bytes | None) -> tuple[str, ...]:
    """``[tool.netdisco] spiders`` of a pyproject.toml, checked as ``module:Class`` names."""
    table = read_pyproject(pyproject)
    spiders = table.get("tool", {}).get("netdisco", {}).get("spiders", [])
    pattern = re.compile(r"[A-Za-z_][\w.]{0,199}:[A-Za-z_]\w{0,99}")
    if not isinstance(spiders, list) or not all(
        isinstance(s, str) and pattern.fullmatch(s) for s in spiders
    ):
        raise refuse(400, "bad_pyproject", "[tool.netdisco] spiders must be 'module:Class' strings")
    return tuple(spiders)


def _requirement(line: str, where: str) -> str:
    try:
        requirement = Requirement(line)
    except InvalidRequirement as exc:
        raise refuse(
            400, "bad_requirement", f"{where}: {line!r} is not a requirement: {exc}"
        ) from None
    if requirement.url:
        raise refuse(
            400,
            "bad_requirement",
            f"{where}: {line!r} names a URL or path; bundle it in wheels/ instead",
        )
    return str(requirement)


def requirements(pyproject: bytes | None, requirements_txt: bytes | None) -> tuple[str, ...]:
    """The project's declared dependencies, each a PEP 508 requirement by name only:
    ``[project] dependencies`` of pyproject.toml, else the lines of requirements.txt
    (no options, includes, URLs or paths: those would fetch from where nobody allowed)."""
    if pyproject is not None:
        declared = read_pyproject(pyproject).get("project", {}).get("dependencies")
        if declared is not None:
            if not isinstance(declared, list) or not all(isinstance(d, str) for d in declared):
                raise refuse(400, "bad_pyproject", "[project] dependencies must be strings")
            return tuple(_requirement(d, "pyproject.toml") for d in declared)
    if requirements_txt is None:
        return ()
    try:
        lines = requirements_txt.decode("utf-8").splitlines()
    except UnicodeDecodeError:
        raise refuse(400, "bad_requirement", "requirements.txt is not UTF-8") from None
    stripped = (line.split(" #", 1)[0].strip() for line in lines)
    return tuple(
        _requirement(line, "requirements.txt")
        for line in stripped
        if line and not line.startswith("#")
    )


def module_name(member: str) -> str | None:
    """``pkg/mod.py`` -> ``pkg.mod``; None when the path is not an importable module."""
    parts = member.removesuffix(".py").split("/")
    if parts[-1] == "__init__":
        parts = parts[:-1]
    if not parts or not all(p.isidentifier() for p in parts[:-1]):
        return None
    if not _MODULE_FILE.fullmatch(parts[-1]):
        return None
    return ".".join(parts)


def _base_names(node: ast.ClassDef) -> Iterable[str]:
    for base in node.bases:
        if isinstance(base, ast.Name):
            yield base.id
        elif isinstance(base, ast.Attribute):
            yield base.attr


def _classes(sources: dict[str, bytes]) -> dict[tuple[str, str], ast.ClassDef]:
    """Every top-level class of the project's modules by (module, class); files that do
    not parse are skipped."""
    found: dict[tuple[str, str], ast.ClassDef] = {}
    for member, source in sorted(sources.items()):
        module = module_name(member) if member.endswith(".py") else None
        if module is None or member.startswith("wheels/"):
            continue
        try:
            tree = ast.parse(source)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            continue
        found.update(
            ((module, node.name), node) for node in tree.body if isinstance(node, ast.ClassDef)
        )
    return found


def find_spiders(sources: dict[str, bytes]) -> tuple[str, ...]:
    """Every top-level class deriving (through the project's own classes too) from a
    netdisco spider base, as ``module:Class``; files that do not parse are skipped."""
    classes = [(m, c, set(_base_names(node))) for (m, c), node in _classes(sources).items()]
    spider_names = set(SPIDER_BASES)
    found: set[tuple[str, str]] = set()
    while True:
        new = {(m, c) for m, c, bases in classes if bases & spider_names} - found
        if not new:
            break
        found |= new
        spider_names |= {c for _, c in new}
    return tuple(sorted(f"{m}:{c}" for m, c in found))


def _own_name(node: ast.ClassDef) -> str | None:
    """The string a class body assigns to ``name`` (``name = "x"``, ``name: str = "x"``)."""
    for stmt in node.body:
        targets = stmt.targets if isinstance(stmt, ast.Assign) else []
        if isinstance(stmt, ast.AnnAssign):
            targets = [stmt.target]
        value = getattr(stmt, "value", None)
        named = any(isinstance(t, ast.Name) and t.id == "name" for t in targets)
        if named and isinstance(value, ast.Constant) and isinstance(value.value, str):
            return value.value or None
    return None


def spider_names(sources: dict[str, bytes], spiders: Iterable[str]) -> dict[str, str]:
    """Each spider's ``name``, read from the source as the class would have it: its own
    ``name``, else the nearest of the project's base classes that sets one, else its
    class name in lower case (what :class:`netdisco.Spider` falls back to)."""
    classes = _classes(sources)
    by_class = {c: node for (_, c), node in classes.items()}

    def name_of(node: ast.ClassDef | None, depth: int) -> str | None:
        if node is None or depth > 20:
            return None
        own = _own_name(node)
        bases = (by_class.get(b) for b in _base_names(node))
        return own or next((n for b in bases if (n := name_of(b, depth + 1))), None)

    names = {}
    for ref in spiders:
        module, _, cls = ref.partition(":")
        names[ref] = name_of(classes.get((module, cls)), 0) or cls.lower()
    return names


def unique_names(names: Mapping[str, str]) -> dict[str, str]:
    """``names`` when no two spiders share one; else refused, naming both."""
    seen: dict[str, str] = {}
    for ref, name in sorted(names.items()):
        if not NAME.fullmatch(name) or ".." in name:
            raise refuse(
                422,
                "bad_spider_name",
                f"spider {ref} is named {name!r}: a name is letters, digits, '_', '.', '-'",
            )
        if name in seen:
            raise refuse(
                422,
                "duplicate_spider_name",
                f"spiders {seen[name]} and {ref} are both named {name!r}: "
                "a job names its spider, so each name must be one spider",
            )
        seen[name] = ref
    return dict(names)


# --- unpacking ------------------------------------------------------------------------------


def unpack(data: bytes, target: Path, max_size: int) -> None:
    """Unpack a checked archive into ``target`` (which must be empty or absent): every
    member is checked again, and written only below ``target``, as a plain file."""
    target.mkdir(parents=True, exist_ok=True)
    root = target.resolve()
    with _open(data) as archive:
        for info in _checked_members(archive, max_size):
            destination = root.joinpath(*member_path(info.filename).parts)
            if not destination.resolve().is_relative_to(root):
                raise refuse(400, "path_traversal", f"archive member {info.filename!r} leaves")
            if info.is_dir():
                destination.mkdir(parents=True, exist_ok=True)
                continue
            destination.parent.mkdir(parents=True, exist_ok=True)
            destination.write_bytes(read_member(archive, info, UNPACKED_FACTOR * max_size))
