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
from tests.projects.support import kazoo, write_project

ROOT = "/netdiscovery"


async def _deploy(hosts: str, directory: Path, project: str = "docs") -> str:
    data = pack(directory)
    async with kazoo(hosts) as client:
        version, created = await ProjectStore(client, ROOT).put(
            project, data, inspect(data, 8 << 20), None
        )
    assert created
    return version.id


async def test_install_runs_the_project_and_the_engines_netdisco(
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


async def test_unknown_project_or_version_is_a_404(zk_hosts: str, tmp_path: Path) -> None:
    await _deploy(zk_hosts, write_project(tmp_path / "proj"))
    async with kazoo(zk_hosts) as client:
        for project, version in (("nope", None), ("docs", "0" * 64)):
            with pytest.raises(ProjectRefused) as caught:
                await install(client, ROOT, project, version, tmp_path / "cache")
            assert caught.value.status == 404


async def test_garbage_collection_removes_deleted_versions(zk_hosts: str, tmp_path: Path) -> None:
    digest = await _deploy(zk_hosts, write_project(tmp_path / "proj"))
    cache = tmp_path / "cache"
    async with kazoo(zk_hosts) as client:
        found = await install(client, ROOT, "docs", None, cache)
        assert await collect_garbage(client, ROOT, cache, unused_days=7) == 0
        assert found.python.exists()
        await ProjectStore(client, ROOT).delete("docs", digest)
        assert await collect_garbage(client, ROOT, cache, unused_days=7) == 1
    assert not found.path.parent.exists()
