"""Scrapyd eggs become directory projects: their files and a scrapy.cfg naming the settings
module of their ``entry_points.txt``; a hostile egg is refused before a member is read."""

from __future__ import annotations

import configparser
import io
import stat
import zipfile

import pytest

from netdisco.exceptions import ProjectRefused
from netdisco.projects.archive import from_egg, inspect, pack
from tests.monitor.test_projects import _zip
from tests.netdisco.scrapy_reference.runs import PROJECT

CAP = 1 << 20
ENTRY_POINTS = ("EGG-INFO/entry_points.txt", b"[scrapy]\nsettings = bookproj.settings\n")


def egg(*more: tuple[str, bytes]) -> tuple[tuple[str, bytes], ...]:
    """The reference project's package as bdist_egg lays it out, its metadata beside it."""
    files = sorted(
        (p.relative_to(PROJECT).as_posix(), p.read_bytes())
        for p in (PROJECT / "bookproj").rglob("*.py")
    )
    metadata = [("EGG-INFO/PKG-INFO", b"Name: project\n"), ("EGG-INFO/zip-safe", b"\n")]
    compiled = [("bookproj/__pycache__/settings.cpython-311.pyc", b"\x00" * 16)]
    return (*files, *metadata, *compiled, ENTRY_POINTS, *more)


def test_an_egg_is_its_files_and_a_scrapy_cfg_and_finds_the_projects_spiders() -> None:
    converted = from_egg(_zip(*egg()), CAP)
    manifest = inspect(converted, CAP)
    assert manifest.kind == "directory"
    assert sorted(manifest.names.values()) == ["authors", "books"]
    with zipfile.ZipFile(io.BytesIO(converted)) as archive:
        names = archive.namelist()
        cfg = configparser.ConfigParser()
        cfg.read_string(archive.read("scrapy.cfg").decode())
    assert cfg.get("settings", "default") == "bookproj.settings"
    assert not [n for n in names if n.startswith("EGG-INFO/") or n.endswith(".pyc")]
    assert "bookproj/spiders/books.py" in names
    assert from_egg(_zip(*egg()), CAP) == converted  # the same files: the same version


def _refused(data: bytes, cap: int = CAP) -> tuple[int, str]:
    with pytest.raises(ProjectRefused) as caught:
        from_egg(data, cap)
    return caught.value.status, caught.value.code


HOSTILE = [
    ("not a zip", b"PK\x03\x04 but not a zip", 400, "not_a_zip"),
    ("no entry points", _zip(*egg()[:-1]), 400, "not_an_egg"),
    ("entry points without [scrapy]", _zip(("EGG-INFO/entry_points.txt", b"[x]\ny = z\n")),
     400, "not_an_egg"),
    ("a settings module that is not a name", _zip(
        ("EGG-INFO/entry_points.txt", b"[scrapy]\nsettings = os; import x\n")), 400, "not_an_egg"),
    ("entry points not text", _zip(("EGG-INFO/entry_points.txt", b"\xff\xfe[")),
     400, "not_an_egg"),
    ("traversal", _zip(*egg(("../evil.py", b"x = 1\n"))), 400, "path_traversal"),
    ("absolute", _zip(*egg(("/etc/evil.py", b""))), 400, "bad_member_name"),
    ("bomb", _zip(*egg(("bookproj/zeros.bin", bytes(20 << 20)))), 413, "zip_bomb"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("data", "status", "code"), [c[1:] for c in HOSTILE], ids=[c[0] for c in HOSTILE]
)
def test_a_hostile_egg_is_refused(data: bytes, status: int, code: str) -> None:
    assert _refused(data) == (status, code)


def test_an_egg_over_the_cap_or_with_a_symlink_is_refused() -> None:
    assert _refused(_zip(*egg()), cap=100) == (413, "too_large")
    link = _zip(*egg(), ("bookproj/link.py", b"/etc/passwd"), mode=stat.S_IFLNK | 0o777)
    assert _refused(link) == (400, "symlink")


def test_a_scrapy_project_packs_with_scrapy_cfg_alone_and_a_bare_directory_is_told_what_to_do(
    tmp_path,
) -> None:
    manifest = inspect(pack(PROJECT), CAP)  # scrapy.cfg and settings.py, no requirements
    assert sorted(manifest.names.values()) == ["authors", "books"]
    (tmp_path / "spiders.py").write_text("class A: pass\n")
    with pytest.raises(ProjectRefused) as caught:
        pack(tmp_path)
    assert "deploy the directory that holds scrapy.cfg" in caught.value.message
    assert "or add a requirements.txt" in caught.value.message
    (tmp_path / "scrapy.cfg").write_text("[settings]\ndefault = x.settings\n")
    with pytest.raises(ProjectRefused) as caught:
        inspect(pack(tmp_path), CAP)
    assert caught.value.code == "no_spiders"
    assert "pyproject.toml" not in caught.value.message  # a Scrapy project has none
    assert "put the spiders in the SPIDER_MODULES package" in caught.value.message
