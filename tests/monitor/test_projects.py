"""Deploying projects through a real monitor and ZooKeeper: the CLI, the routes, the
refusals (bad archives, wrong tokens) and an install while the monitor is down."""

from __future__ import annotations

import asyncio
import io
import os
import stat
import subprocess
import zipfile
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from kazoo.client import KazooClient

from monitor.config import load_config
from monitor.control import check_token
from monitor.settings import MonitorConfig
from netdisco.cli import main
from netdisco.exceptions import ControlRefused
from netdisco.projects import install
from netdisco.projects.archive import pack
from tests.monitor.conftest import MonitorFactory
from tests.projects.support import SPIDER, kazoo, write_project

ROOT = "/netdiscovery"
PROJECTS = f"{ROOT}.projects"


def _config(zk_hosts: str, env: dict[str, str] | None = None, **control: Any) -> MonitorConfig:
    overrides = {
        "zookeeper.hosts": zk_hosts,
        "zookeeper.session_timeout": 2.0,
        "http.port": 0,
        "http.poll_status": 0.0,
        **{f"control.{k}": v for k, v in control.items()},
    }
    return load_config(None, env=env or {}, overrides=overrides)


async def _call(method: str, url: str, **kwargs: Any) -> tuple[int, Any]:
    async with aiohttp.ClientSession() as session, session.request(method, url, **kwargs) as r:
        return r.status, await r.json()


async def _stored(zk_hosts: str) -> list[str]:
    """Every node under the projects root (nothing, after a refusal)."""
    client = KazooClient(hosts=zk_hosts)
    await asyncio.to_thread(client.start, 15)
    try:
        if not await asyncio.to_thread(client.exists, PROJECTS):
            return []
        found = []
        for name in await asyncio.to_thread(client.get_children, PROJECTS):
            found += [f"{name}/{c}" for c in client.get_children(f"{PROJECTS}/{name}")]
        return found
    finally:
        await asyncio.to_thread(client.stop)
        await asyncio.to_thread(client.close)


async def test_deploy_list_default_delete_then_install_with_the_monitor_down(
    zk_hosts: str, start_monitor: MonitorFactory, tmp_path: Path
) -> None:
    monitor, recorder = await start_monitor(_config(zk_hosts), fresh=False)
    url = monitor.http.url
    project = write_project(tmp_path / "docsproj")
    deploy = ["deploy", str(project), "--monitor", url, "--version", "1.0"]
    assert await asyncio.to_thread(main, deploy) == 0
    (project / "docsproj" / "more.py").write_text(
        SPIDER.replace("Docs", "More").replace('"docs"', '"more"')
    )
    assert await asyncio.to_thread(main, [*deploy[:-1], "2.0"]) == 0
    status, body = await _call("GET", f"{url}/netdiscovery/monitor/projects")
    assert status == 200
    [listed] = body["projects"]
    first, second = listed["versions"]
    assert listed["project"] == "docsproj"
    assert (first["label"], second["label"]) == ("1.0", "2.0")
    assert second["spiders"] == ["docsproj.more:More", "docsproj.spiders:Docs"]
    assert listed["default"] == second["id"]  # the newest, while none is set
    status, _ = await _call(
        "PUT", f"{url}/netdiscovery/monitor/projects/docsproj/default", json={"version": "1.0"}
    )
    assert status == 200
    _, shown = await _call("GET", f"{url}/netdiscovery/monitor/projects/docsproj")
    assert shown["default"] == first["id"]
    status, _ = await _call(
        "DELETE", f"{url}/netdiscovery/monitor/projects/docsproj/versions/{second['id']}"
    )
    assert status == 200
    _, shown = await _call("GET", f"{url}/netdiscovery/monitor/projects/docsproj")
    assert [v["id"] for v in shown["versions"]] == [first["id"]]
    deployed = recorder.of("project_deployed")
    assert [e.detail["label"] for e in deployed] == ["1.0", "2.0"]
    assert deployed[0].detail["version"] == first["id"]
    await monitor.close()  # the engine reads ZooKeeper only
    async with kazoo(zk_hosts) as client:
        installed = await install(client, ROOT, "docsproj", None, tmp_path / "cache")
    assert installed.version == first["id"]
    done = await asyncio.to_thread(
        subprocess.run,
        [str(installed.python), "-c", "import docsproj.spiders, netdisco"],
        cwd=installed.path,
        capture_output=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert not (installed.path / "docsproj" / "more.py").exists()


def _zip(*members: tuple[str, bytes], mode: int = stat.S_IFREG | 0o644) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in members:
            info = zipfile.ZipInfo(name)
            info.external_attr = mode << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, data)
    return buffer.getvalue()


PYPROJECT = ("pyproject.toml", b'[project]\nname = "p"\nversion = "1"\n')
SPIDER_FILE = ("p/spiders.py", SPIDER.encode())


def _duplicate() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr(*PYPROJECT)
        archive.writestr(*SPIDER_FILE)
        with pytest.warns(UserWarning, match="Duplicate name"):
            archive.writestr(*SPIDER_FILE)
    return buffer.getvalue()


BAD = [
    ("not a zip", b"hello, world", 400, "not_a_zip"),
    ("traversal", _zip(PYPROJECT, SPIDER_FILE, ("../evil.py", b"")), 400, "path_traversal"),
    ("deep traversal", _zip(PYPROJECT, ("p/../../x.py", b"")), 400, "path_traversal"),
    ("absolute", _zip(PYPROJECT, SPIDER_FILE, ("/etc/evil.py", b"")), 400, "bad_member_name"),
    ("drive letter", _zip(PYPROJECT, SPIDER_FILE, ("C:/evil.py", b"")), 400, "bad_member_name"),
    ("backslash", _zip(PYPROJECT, SPIDER_FILE, ("p\\evil.py", b"")), 400, "bad_member_name"),
    ("duplicate", _duplicate(), 400, "duplicate_member"),
    ("no project file", _zip(SPIDER_FILE), 400, "no_project_file"),
    ("no spiders", _zip(PYPROJECT, ("p/a.py", b"class A: pass\n")), 422, "no_spiders"),
    ("bomb", _zip(PYPROJECT, SPIDER_FILE, ("p/zeros.bin", bytes(20 << 20))), 413, "zip_bomb"),
    (
        "over the cap",
        _zip(PYPROJECT, SPIDER_FILE, ("p/r.bin", os.urandom(300_000))),
        413,
        "too_large",
    ),
    (
        "url requirement",
        _zip(
            ("pyproject.toml", b'[project]\nname="p"\ndependencies=["x @ http://example.com/x"]\n'),
            SPIDER_FILE,
        ),
        400,
        "bad_requirement",
    ),
]


async def test_bad_archives_are_refused_and_nothing_is_stored(
    zk_hosts: str, start_monitor: MonitorFactory
) -> None:
    symlink = _zip(PYPROJECT, SPIDER_FILE, ("p/link.py", b"/etc/passwd"), mode=stat.S_IFLNK | 0o777)
    cases = [*BAD, ("symlink", symlink, 400, "symlink")]
    monitor, _ = await start_monitor(_config(zk_hosts, max_project_size=200_000), fresh=False)
    base = f"{monitor.http.url}/netdiscovery/monitor/projects"
    for what, data, status, code in cases:
        got, body = await _call("POST", f"{base}/p", data=data)
        assert (got, body["error"]["code"]) == (status, code), what
    for name in ("Bad", "a..b", "-x", "x" * 65):
        got, body = await _call("POST", f"{base}/{name}", data=_zip(PYPROJECT, SPIDER_FILE))
        assert (got, body["error"]["code"]) == (400, "bad_project_name"), name
    assert await _stored(zk_hosts) == []
    got, _ = await _call("POST", f"{base}/p", data=_zip(PYPROJECT, SPIDER_FILE))
    assert got == 201  # the same monitor stores a good one


async def test_deploy_wants_the_deploy_token_never_the_control_token(
    zk_hosts: str, start_monitor: MonitorFactory, tmp_path: Path
) -> None:
    env = {"DEPLOY": "d3ploy", "CONTROL": "c0ntrol"}
    config = _config(zk_hosts, env, deploy_token_env="DEPLOY", monitor_token_env="CONTROL")
    monitor, _ = await start_monitor(config, fresh=False)
    url = f"{monitor.http.url}/netdiscovery/monitor/projects/docsproj"
    data = pack(write_project(tmp_path / "docsproj"))
    for headers, status, code in (
        ({}, 401, "unauthorized"),
        ({"Authorization": "Bearer wrong"}, 403, "forbidden"),
        ({"Authorization": "Bearer c0ntrol"}, 403, "forbidden"),
        ({"Authorization": "Bearer d3ploy", "Origin": "http://evil.test"}, 403, "cross_origin"),
    ):
        got, body = await _call("POST", url, data=data, headers=headers)
        assert (got, body["error"]["code"]) == (status, code), headers
        got, _ = await _call("DELETE", f"{url}/versions/{'0' * 64}", headers=headers)
        assert got == status
    assert await _stored(zk_hosts) == []
    got, body = await _call("POST", url, data=data, headers={"Authorization": "Bearer d3ploy"})
    assert got == 201
    assert body["spiders"] == ["docsproj.spiders:Docs"]
    got, again = await _call("POST", url, data=data, headers={"Authorization": "Bearer d3ploy"})
    assert (got, again["id"], again["new"]) == (200, body["id"], False)  # immutable, by hash


def test_without_a_deploy_token_only_loopback_deploys() -> None:
    check_token(None, {}, "127.0.0.1:8316", "127.0.0.1", "deploy")
    for host, socket_host in (("monitor.test:8316", "192.0.2.7"), ("monitor.test", "127.0.0.1")):
        with pytest.raises(ControlRefused) as caught:
            check_token(None, {}, host, socket_host, "deploy")
        assert caught.value.status == 403


def test_the_deploy_token_must_differ_from_the_control_token(zk_hosts: str) -> None:
    from netdisco.exceptions import ConfigError

    with pytest.raises(ConfigError, match="deploy_token_env"):
        _config(zk_hosts, {"T": "same"}, deploy_token_env="T", monitor_token_env="T")
