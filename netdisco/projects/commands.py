"""The commands a project declares as jobs, read from its pyproject.toml at deploy.

::

    [tool.netdisco.commands]
    quotes = ["./crawl.sh", "--pages", "3"]     # a file of the project
    walk = ["node", "walk.js"]                  # a program on PATH (the venv's bin first)

Each is an argv list (never a shell string); its program is a file of the archive or
a program name, and a file is made executable when the version is installed (a packed
archive keeps no file modes). The bounds are :mod:`netdisco.cluster.commands`'.
"""

from __future__ import annotations

import stat
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from netdisco.cluster.commands import check_commands, program_path
from netdisco.exceptions import ConfigError, ProjectRefused


def read_pyproject(pyproject: bytes | None) -> dict[str, Any]:
    """A pyproject.toml's table ({} when there is none); 400 ``bad_pyproject`` if unreadable."""
    if pyproject is None:
        return {}
    try:
        return tomllib.loads(pyproject.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        message = f"pyproject.toml cannot be read: {exc}"
        raise ProjectRefused(400, "bad_pyproject", message) from None


def project_command(
    project: str | None, name: str, commands: Mapping[str, tuple[str, ...]]
) -> tuple[str, ...]:
    """The argv a version declares for command ``name``; else a ``ConfigError`` naming the
    commands it has (the monitor refuses the job with it, the engine fails it with it)."""
    if name in commands:
        return commands[name]
    have = ", ".join(sorted(commands)) or "none ([tool.netdisco.commands] in pyproject.toml)"
    raise ConfigError(
        "command", f"project {project!r} has no command {name!r}; its commands: {have}"
    )


def declared_commands(pyproject: bytes | None, members: set[str]) -> dict[str, tuple[str, ...]]:
    """``[tool.netdisco.commands]``, checked; a program path must be a file of the archive
    (``members``), and a bare name must not be one (it would be looked up on PATH)."""
    table = read_pyproject(pyproject).get("tool", {}).get("netdisco", {}).get("commands", {})
    try:
        commands = check_commands(table)
    except ConfigError as exc:
        raise ProjectRefused(400, "bad_command", f"[tool.netdisco.commands] {exc}") from None
    for name, argv in commands.items():
        path = program_path(argv[0])
        if path is None and argv[0] in members:
            raise ProjectRefused(
                400,
                "bad_command",
                f"[tool.netdisco.commands] {name}: {argv[0]!r} would be looked up on PATH; "
                f"write './{argv[0]}' to run the project's file",
            )
        if path is not None and path.as_posix() not in members:
            raise ProjectRefused(
                400,
                "bad_command",
                f"[tool.netdisco.commands] {name}: the project has no file {argv[0]!r}",
            )
    return commands


def make_executable(source: Path, commands: Mapping[str, tuple[str, ...]]) -> None:
    """Give the commands' program files of an unpacked version their execute bits."""
    root = source.resolve()
    for argv in commands.values():
        path = program_path(argv[0])
        target = root.joinpath(*path.parts).resolve() if path is not None else None
        if target is not None and target.is_relative_to(root) and target.is_file():
            target.chmod(target.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
