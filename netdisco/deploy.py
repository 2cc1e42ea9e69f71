"""``netdisco deploy``: pack a project directory (or take a built wheel) and upload it to a
monitor, which checks it and stores it in ZooKeeper as a new immutable version."""

from __future__ import annotations

import argparse
import configparser
import json
import os
import tomllib
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

import aiohttp

from netdisco.exceptions import ConfigError, ProjectRefused
from netdisco.projects.archive import check_label, check_project_name, default_name, pack

TOKEN_ENV = "NETDISCO_DEPLOY_TOKEN"


def add_parser(commands: Any, common: argparse.ArgumentParser) -> None:
    deploy = commands.add_parser(
        "deploy",
        parents=[common],
        help="upload a project (a directory or a wheel) to the cluster through a monitor",
        description="Packs DIR (a Scrapy project beside its scrapy.cfg, or a directory with "
        "a pyproject.toml or requirements.txt) into a zip, or "
        "takes a built .whl, and uploads it; the monitor answers with the version's hash. "
        f"The deploy token is read from ${TOKEN_ENV} (or --token-env).",
    )
    deploy.add_argument("path", nargs="?", default=".", help="project directory or .whl (.)")
    deploy.add_argument("--monitor", required=True, help="the monitor's URL, http://HOST:PORT")
    deploy.add_argument("--project", help="project name (default: from pyproject or the name)")
    deploy.add_argument("--version", dest="label", help="a label for this version (e.g. 1.2)")
    deploy.add_argument("--token-env", default=TOKEN_ENV, help=f"token variable ({TOKEN_ENV})")
    deploy.set_defaults(func=run)


def archive_of(path: Path) -> tuple[bytes, str | None, str]:
    """(the archive, the wheel's file name or None, the default project name)."""
    if path.is_file() and path.suffix == ".whl":
        return path.read_bytes(), path.name, default_name(path.name.split("-", 1)[0])
    if not path.is_dir():
        raise ConfigError(str(path), "is neither a project directory nor a .whl file")
    name = path.resolve().name
    pyproject = path / "pyproject.toml"
    if pyproject.is_file():
        try:
            declared = tomllib.loads(pyproject.read_text("utf-8")).get("project", {}).get("name")
        except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
            raise ConfigError(str(pyproject), f"cannot be read: {exc}") from None
        name = declared if isinstance(declared, str) else name
    elif (path / "scrapy.cfg").is_file():
        name = scrapy_project_name(path / "scrapy.cfg") or name
    return pack(path), None, default_name(name)


def scrapy_project_name(cfg: Path) -> str | None:
    """``[deploy] project`` of a scrapy.cfg: the name scrapyd-deploy deploys it under."""
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read(cfg, encoding="utf-8")
    except (configparser.Error, UnicodeDecodeError):
        return None
    return parser.get("deploy", "project", fallback=None) or None


def upload_url(monitor: str, project: str, label: str | None, filename: str | None) -> str:
    """The monitor's upload route for ``project`` (an http(s) URL only)."""
    parts = urlsplit(monitor)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError("--monitor", f"expected http://HOST:PORT, got {monitor!r}")
    query = "&".join(
        f"{key}={quote(value, safe='')}"
        for key, value in (("version", label), ("filename", filename))
        if value
    )
    base = f"{monitor.rstrip('/')}/netdiscovery/monitor/projects/{project}"
    return f"{base}?{query}" if query else base


async def run(args: argparse.Namespace) -> int:
    data, filename, default = archive_of(Path(args.path))
    project = check_project_name(args.project or default)
    url = upload_url(args.monitor, project, check_label(args.label), filename)
    token = os.environ.get(args.token_env, "").strip()
    headers = {"Content-Type": "application/zip"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    timeout = aiohttp.ClientTimeout(total=300)
    async with (
        aiohttp.ClientSession(timeout=timeout) as session,
        session.post(url, data=data, headers=headers) as resp,
    ):
        text = await resp.text()
        status = resp.status
    try:
        body = json.loads(text)
    except ValueError:
        body = {}
    if status >= 400:
        error = body.get("error", {}) if isinstance(body, dict) else {}
        message = error.get("message") or text[:500]
        raise ProjectRefused(status, error.get("code", "refused"), f"{status}: {message}")
    print(json.dumps(body, indent=2))
    return 0
