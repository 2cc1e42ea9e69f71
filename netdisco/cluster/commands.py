"""Commands as jobs: the bounds every argument list is held to, wherever it comes from.

A project declares commands (``[tool.netdisco.commands]``, read at deploy by
:mod:`netdisco.projects.commands`) and a job request may add arguments to one
(``argv``). Both are argv lists handed to ``exec``, never a shell string, so no
quoting can turn an argument into a command; they are still bounded here (count,
length, no control characters), once, for the request, the version node and the job
node alike, because anyone who may write ZooKeeper could have written them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import PurePosixPath
from typing import Any

from netdisco.exceptions import ConfigError
from netdisco.values import NAME

#: the most arguments a list holds, the longest argument and the whole list's bytes
MAX_ARGS = 64
MAX_ARG = 1024
MAX_ARGV_BYTES = 8192
#: the most commands a project declares
MAX_COMMANDS = 100
#: the only setting a command job takes: its grace between SIGTERM and SIGKILL
COMMAND_SETTINGS = frozenset({"stop_deadline"})
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_PROGRAM = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]{0,99}")


def check_argv(key: str, value: Any, least: int = 0) -> tuple[str, ...]:
    """``value`` as an argument list if it is ``least`` to :data:`MAX_ARGS` strings, none
    over :data:`MAX_ARG` characters nor holding a control character, at most
    :data:`MAX_ARGV_BYTES` in all; else a ``ConfigError`` naming ``key`` and the argument."""
    if not isinstance(value, list | tuple) or not least <= len(value) <= MAX_ARGS:
        expected = f"expected a list of {least} to {MAX_ARGS} strings"
        raise ConfigError(key, f"{expected}, got {value!r:.80}")
    for index, arg in enumerate(value):
        if not isinstance(arg, str):
            raise ConfigError(key, f"argument {index} is not a string: {arg!r:.80}")
        if len(arg) > MAX_ARG:
            raise ConfigError(key, f"argument {index} is over {MAX_ARG} characters")
        if _CONTROL.search(arg):
            raise ConfigError(key, f"argument {index} holds a control character: {arg!r:.80}")
    if sum(len(arg.encode()) + 1 for arg in value) > MAX_ARGV_BYTES:
        raise ConfigError(key, f"the arguments are over {MAX_ARGV_BYTES} bytes in all")
    return tuple(value)


def program_path(program: str) -> PurePosixPath | None:
    """Where a command's program is: a path inside the project (it has a ``/``: ``./crawl.sh``,
    ``bin/crawl``), or None for a program name found on ``PATH`` (``node``, ``scrapy``).
    ``ConfigError`` for an absolute path, one that climbs out (``..``) or a bad name."""
    if "/" not in program:
        if not _PROGRAM.fullmatch(program):
            raise ConfigError("command", f"{program!r} is not a program name")
        return None
    parts = program.split("/")
    if program.startswith("/") or ".." in parts or program.endswith("/"):
        raise ConfigError(
            "command",
            f"{program!r} is outside the project: a command's program is a file of the "
            "project (./crawl.sh) or a program on PATH (node)",
        )
    return PurePosixPath(*[p for p in parts if p not in ("", ".")])


def check_commands(value: Any) -> dict[str, tuple[str, ...]]:
    """A version's commands (name -> argv), each checked: a job name, an argument list of
    at least the program, the program a project path or a name on ``PATH``."""
    if not isinstance(value, Mapping) or len(value) > MAX_COMMANDS:
        raise ConfigError("commands", f"expected a table of at most {MAX_COMMANDS} commands")
    found = {}
    for name, argv in value.items():
        if not isinstance(name, str) or not NAME.fullmatch(name) or ".." in name:
            raise ConfigError("commands", f"{name!r} is not a name (letters, digits, '_.-')")
        found[name] = check_argv(f"commands.{name}", argv, least=1)
        program_path(found[name][0])
    return found


def command_request(body: Mapping[str, Any]) -> tuple[str, str, tuple[str, ...]]:
    """A job request's kind (``spider`` or ``command``), the name it asks and its extra
    arguments: a command job names a ``command`` of its ``project``, takes ``argv`` and
    no spider ``args``, and of the settings only ``stop_deadline``."""
    if "command" not in body:
        if "argv" in body:
            raise ConfigError("argv", 'only a command job takes "argv" (use "args" for a spider)')
        return "spider", str(body.get("spider")), ()
    name = body["command"]
    if "spider" in body or "args" in body:
        key = "spider" if "spider" in body else "args"
        raise ConfigError(key, 'a command job names a "command" and takes "argv", not this')
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise ConfigError("command", f"expected the name of a project's command, got {name!r:.80}")
    if body.get("project") is None:
        raise ConfigError("project", "a command is declared by a project: name the project")
    settings = body.get("settings") or {}
    unknown = sorted(set(settings) - COMMAND_SETTINGS)
    if unknown:
        raise ConfigError(f"settings.{unknown[0]}", "a command job takes only stop_deadline")
    if "stop_deadline" in settings and seconds(settings["stop_deadline"]) is None:
        raise ConfigError("settings.stop_deadline", "expected seconds, 0 to 3600")
    return "command", name, check_argv("argv", body.get("argv", []))


def seconds(value: Any) -> float | None:
    """A job's ``stop_deadline`` (a number or its text) if it is 0 to 3600 seconds; else None."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return None
    try:
        found = float(value)
    except ValueError:
        return None
    return found if 0 <= found <= 3600 else None
