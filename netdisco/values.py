"""Configuration values: one TOML reader and one parser per type, errors naming the key.

The engine's file, a spider's settings, the ``[zookeeper]`` table and the monitor's
file all come from TOML, environment variables and command-line flags. Whatever
the source, a value goes through :func:`convert` with the type the setting
declares, so ``true``/``yes``/``1`` mean the same everywhere, a number is never
``inf`` or ``nan``, and every error is a :class:`ConfigError` naming the key.
"""

from __future__ import annotations

import ipaddress
import json
import math
import re
import tomllib
import types
import typing
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from netdisco.exceptions import ConfigError

_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})


def read_toml(path: str | Path, *, key: str = "config") -> dict[str, Any]:
    """A TOML file as a dict; unreadable or invalid files fail naming ``key``."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(key, f"cannot read {str(path)!r}: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(key, f"{str(path)!r} is not UTF-8: {exc}") from exc
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(key, f"{str(path)!r} is not valid TOML: {exc}") from exc


def parse_bool(key: str, value: Any) -> bool:
    """A boolean, or its text (``true/false``, ``yes/no``, ``on/off``, ``1/0``)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        lowered = value.strip().lower()
        if lowered in _TRUE:
            return True
        if lowered in _FALSE:
            return False
    raise ConfigError(key, f"expected true or false, got {value!r}")


def _scalar(key: str, text: str, kind: str) -> Any:
    """A number's text as JSON reads it (``64``, ``0.25``, ``1e3``; ``true`` stays a bool)."""
    try:
        return json.loads(text)
    except ValueError:
        raise ConfigError(key, f"expected {kind}, got {text!r}") from None


def _finite(key: str, number: float) -> None:
    if not math.isfinite(number):
        raise ConfigError(key, f"must be a finite number, got {number!r}")


def parse_float(key: str, value: Any) -> float:
    """A finite number, or its text; ``inf`` and ``nan`` are refused."""
    number = _scalar(key, value, "float") if isinstance(value, str) else value
    if isinstance(number, bool) or not isinstance(number, int | float):
        raise ConfigError(key, f"expected float, got {number!r}")
    _finite(key, number)
    return float(number)


def parse_int(key: str, value: Any) -> int:
    """A whole number (``3`` or ``3.0``), or its text; ``inf`` and ``nan`` are refused."""
    number = _scalar(key, value, "int") if isinstance(value, str) else value
    if isinstance(number, bool) or not isinstance(number, int | float):
        raise ConfigError(key, f"expected int, got {number!r}")
    _finite(key, number)
    if number != int(number):
        raise ConfigError(key, f"expected int, got {number!r}")
    return int(number)


def parse_str(key: str, value: Any) -> str:
    """A string, taken as it is (text is never parsed: ``123`` stays ``"123"``)."""
    if not isinstance(value, str):
        raise ConfigError(key, f"expected str, got {value!r}")
    return value


_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*$")


def parse_duration(key: str, value: Any) -> float:
    """``"30m"``, ``"2h"``, ``"1d"``, ``"1.5s"`` or a number of seconds; never 0 or negative.

    One parser for every duration a user writes (a schedule's ``every``, ``age``).
    """
    if isinstance(value, bool):
        raise ConfigError(key, f"expected a duration like '30m', got {value!r}")
    if isinstance(value, int | float):
        seconds = float(value)
    else:
        match = _DURATION.match(str(value))
        if match is None:
            raise ConfigError(
                key, f"expected a duration like '30s', '30m', '6h', '1d', got {value!r}"
            )
        seconds = float(match.group(1)) * _UNITS[match.group(2) or "s"]
    if not seconds > 0 or seconds == float("inf"):
        raise ConfigError(key, f"must be a positive duration, got {value!r}")
    return seconds


def split_commas(text: str) -> list[str]:
    """``"a, b,c"`` as ``["a", "b", "c"]``; empty parts dropped."""
    return [part.strip() for part in text.split(",") if part.strip()]


def parse_strings(
    key: str, value: Any, *, split: Callable[[str], list[str]] = split_commas
) -> tuple[str, ...]:
    """A list of strings; as text, a JSON list (``["a,b", "c"]``) or what ``split`` cuts."""
    items = value
    if isinstance(value, str):
        if value.lstrip().startswith("["):
            try:
                items = json.loads(value)
            except ValueError as exc:
                raise ConfigError(key, f"expected a JSON list of strings: {exc}") from None
        else:
            items = split(value)
    if not isinstance(items, list | tuple) or not all(isinstance(i, str) for i in items):
        raise ConfigError(key, f"expected tuple[str, ...], got {value!r}")
    return tuple(items)


_PARSERS: dict[Any, Callable[[str, Any], Any]] = {
    bool: parse_bool,
    int: parse_int,
    float: parse_float,
    str: parse_str,
    tuple[str, ...]: parse_strings,
}


def convert(key: str, value: Any, kind: Any, *, text: bool = True) -> Any:
    """``value`` as the declared type ``kind`` (``int``, ``float | None``, ...), or why not.

    ``None`` passes for optional types; a converter is chosen by the type
    itself, never by its name, and an undeclared type is a programming error.
    ``text=False`` is for typed sources (a TOML table): a string there is only
    accepted where a string is declared, so ``timeout = "10"`` is an error.
    """
    options = _optional(kind)
    if options is not None:
        return None if value is None else convert(key, value, options, text=text)
    parser = _PARSERS.get(kind)
    if parser is None:
        raise TypeError(f"no parser for {kind!r} (setting {key})")
    if not text and isinstance(value, str) and parser is not parse_str:
        raise ConfigError(key, f"expected {_NAMES.get(kind, kind)}, got {value!r}")
    return parser(key, value)


_NAMES = {bool: "true or false", int: "int", float: "float", tuple[str, ...]: "a list of strings"}


def _optional(kind: Any) -> Any:
    """``X`` for ``X | None``; None for any other type."""
    if not isinstance(kind, types.UnionType) and typing.get_origin(kind) is not typing.Union:
        return None
    rest = [arg for arg in typing.get_args(kind) if arg is not type(None)]
    return rest[0] if len(rest) == 1 else None


def field_types(cls: type) -> dict[str, Any]:
    """The declared (evaluated) type of every field of a dataclass."""
    return typing.get_type_hints(cls)


def parse_table(key: str, value: Any, what: str) -> Mapping[Any, Any]:
    """A table of ``what`` (TOML, a mapping), or its JSON text (``-s``, the environment)."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError as exc:
            raise ConfigError(key, f"expected a JSON object of {what}: {exc}") from None
    if not isinstance(value, Mapping):
        raise ConfigError(key, f"expected a table of {what}, got {value!r}")
    return value


def check_keys(section: str, table: Mapping[str, Any], known: typing.Iterable[str]) -> None:
    """Refuse keys a section does not have, naming the first and listing the known."""
    allowed = sorted(known)
    for key in table:
        if key not in allowed:
            raise ConfigError(f"{section}.{key}", f"unknown key (known: {', '.join(allowed)})")


def read_secret(key: str, variable: str, env: Mapping[str, str]) -> str:
    """The secret in the variable ``variable`` (named by the setting ``key``); a variable
    that is not set, or is empty, is a ConfigError: a deployment that names a token and
    runs without one would otherwise serve control to anyone who reaches it."""
    if variable not in env:
        raise ConfigError(key, f"names the variable {variable!r}, which is not set")
    if not env[variable].strip():
        raise ConfigError(key, f"names the variable {variable!r}, which is empty")
    return env[variable]


#: what a spider launched over HTTP may be called: it ends up in file names, log lines,
#: metrics labels and znodes, so no separators, no ``..``, no control characters
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


def check_name(key: str, value: Any) -> str:
    """``value`` if it is a name ``NAME`` matches (and holds no ``..``), else a ConfigError."""
    if not isinstance(value, str) or not NAME.fullmatch(value) or ".." in value:
        raise ConfigError(
            key, f"expected a name of letters, digits, '_', '.' and '-' (no '..'), got {value!r}"
        )
    return value


def is_loopback(host: str) -> bool:
    """Whether ``host`` binds only to this machine (control without a token is safe there)."""
    if host == "localhost":
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped.is_loopback  # a dual-stack socket's ::ffff:127.0.0.1
    return address.is_loopback
