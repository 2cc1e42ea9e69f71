"""Installing a stored version into its own venv, from ZooKeeper only."""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path

import pytest

from netdisco.exceptions import ProjectRefused
from netdisco.projects import InstalledProject, collect_garbage, install
from netdisco.projects.archive import inspect, pack
from netdisco.projects.store import ProjectStore
from tests.projects.support import SPIDER, kazoo, wheel, write_project

ROOT = "/netdiscovery"


async def _deploy(hosts: str, directory: Path, project: str = "docs") -> str:
    data = pack(directory)
    async with kazoo(hosts) as client:
        version, created = await ProjectStore(client, ROOT).put(
            project, data, inspect(data, 8 << 20), None
        )
    assert created
    return version.id


async def test_install_runs_the_project_and_the_engines_netdisco_then_is_collected(
    zk_hosts: str, tmp_path: Path
) -> None:
    digest = await _deploy(zk_hosts, write_project(tmp_path / "proj"))
    async with kazoo(zk_hosts) as client:
        # two installs of one version at once: one build, one venv
        first, second = await asyncio.gather(
            install(client, ROOT, "docs", None, tmp_path / "cache"),
            install(client, ROOT, "docs", digest, tmp_path / "cache"),
        )
    assert first == second
    assert isinstance(first, InstalledProject)
    assert (first.project, first.version, first.spiders) == (
        "docs",
        digest,
        ("docsproj.spiders:Docs",),
    )
    built = sorted(p.name for p in (tmp_path / "cache" / "docs").iterdir())
    assert built == sorted([digest, f"{digest}.lock"])
    code = "import sys, docsproj, netdisco; print(docsproj.VALUE, sys.prefix)"
    done = await asyncio.to_thread(
        subprocess.run,
        [str(first.python), "-c", code],
        cwd=first.path,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    out = done.stdout.split()
    assert out[0] == "42"
    assert Path(out[1]) == first.python.parent.parent  # the project's venv, not the engine's
    async with kazoo(zk_hosts) as client:  # garbage: only what ZooKeeper no longer has
        assert await collect_garbage(client, ROOT, tmp_path / "cache", unused_days=7) == 0
        assert first.python.exists()
        await ProjectStore(client, ROOT).delete("docs", digest)
        assert await collect_garbage(client, ROOT, tmp_path / "cache", unused_days=7) == 1
    assert not first.path.parent.exists()


async def test_unknown_project_or_version_is_a_404(zk_hosts: str, tmp_path: Path) -> None:
    await _deploy(zk_hosts, write_project(tmp_path / "proj"))
    async with kazoo(zk_hosts) as client:
        for project, version in (("nope", None), ("docs", "0" * 64)):
            with pytest.raises(ProjectRefused) as caught:
                await install(client, ROOT, project, version, tmp_path / "cache")
            assert caught.value.status == 404


async def _run(python: Path, code: str, cwd: Path) -> str:
    done = await asyncio.to_thread(
        subprocess.run, [str(python), "-c", code], cwd=cwd, capture_output=True, text=True,
        timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


async def test_a_bundled_wheel_is_the_dependency_and_a_wheel_is_a_project(
    zk_hosts: str, tmp_path: Path
) -> None:
    directory = write_project(tmp_path / "proj")
    (directory / "pyproject.toml").write_text(
        '[project]\nname = "docsproj"\nversion = "1"\ndependencies = ["nd-bundled-dep==1.0"]\n'
    )
    (directory / "wheels").mkdir()
    dep = wheel("nd_bundled_dep", "1.0", {"nd_bundled_dep.py": "ANSWER = 7\n"})
    (directory / "wheels" / "nd_bundled_dep-1.0-py3-none-any.whl").write_bytes(dep)
    await _deploy(zk_hosts, directory)
    built = wheel("wheelproj", "2.0", {"wheelproj/__init__.py": "", "wheelproj/s.py": SPIDER})
    async with kazoo(zk_hosts) as client:
        store = ProjectStore(client, ROOT)
        await store.put("wheelproj", built, inspect(built, 8 << 20), None,
                        "wheelproj-2.0-py3-none-any.whl")  # fmt: skip
        bundled = await install(client, ROOT, "docs", None, tmp_path / "cache")
        from_wheel = await install(client, ROOT, "wheelproj", None, tmp_path / "cache")
    assert (
        await _run(bundled.python, "import nd_bundled_dep as d; print(d.ANSWER)", tmp_path) == "7"
    )
    assert from_wheel.spiders == ("wheelproj.s:Docs",)
    code = "import wheelproj.s, netdisco, importlib.metadata as m; print(m.version('wheelproj'))"
    assert await _run(from_wheel.python, code, tmp_path) == "2.0"  # installed, not only unpacked
