"""What a feed is (``FeedSpec``) and how the ``feeds`` setting and ``-o``/``-O`` name one.

In TOML, ``feeds`` is a table of URI -> options, as Scrapy's ``FEEDS``::

    [spiders.settings.feeds."out/{spider}-{engine}.csv"]
    fields = ["url", "title"]
    overwrite = true

On the command line (``-s feeds=...``) or in ``NETDISCO_FEEDS`` it is the same
table as JSON. A URI is a file path (``file://`` optional), ``-`` or ``stdout:``
for standard output, or ``sqlite:///PATH`` (also any path ending ``.db``,
``.sqlite``, ``.sqlite3``) for a SQLite table per spider. A path ending ``.warc.gz``
(or ``.warc``), or ``format = "warc"``, archives the responses instead (``warc.py``).
"""

from __future__ import annotations

import dataclasses
import string
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import PurePath, PurePosixPath
from typing import Any

from netdisco.exceptions import ConfigError
from netdisco.values import parse_table

FORMATS = ("jsonl", "json", "csv", "sqlite", "warc")
PLACEHOLDERS = ("spider", "engine", "time")
_BY_SUFFIX = {
    ".jsonl": "jsonl",
    ".jl": "jsonl",
    ".ndjson": "jsonl",
    ".json": "json",
    ".csv": "csv",
    ".db": "sqlite",
    ".sqlite": "sqlite",
    ".sqlite3": "sqlite",
}
_OPTIONS = ("format", "overwrite", "fields")


@dataclass(frozen=True, kw_only=True)
class FeedSpec:
    """One feed: where (a URI template), in which format, append or overwrite, which fields."""

    uri: str
    format: str
    overwrite: bool = False
    fields: tuple[str, ...] = ()
    root: str | None = None  # the directory the filled-in path must stay in (over HTTP)

    @property
    def stdout(self) -> bool:
        """Whether the feed is standard output."""
        return self.uri in ("-", "stdout:")

    @property
    def path(self) -> str:
        """The file path template (the URI without its scheme)."""
        return self.uri.removeprefix("sqlite://").removeprefix("file://")


def make_spec(key: str, uri: str, options: Mapping[str, Any]) -> FeedSpec:
    """A validated FeedSpec; errors name ``key``."""
    unknown = set(options) - set(_OPTIONS)
    if unknown:
        raise ConfigError(f"{key}.{sorted(unknown)[0]}", f"unknown option (known: {_OPTIONS})")
    _check_template(key, uri)
    kind = options.get("format") or _guess_format(key, uri)
    if kind not in FORMATS:
        raise ConfigError(f"{key}.format", f"expected one of {FORMATS}, got {kind!r}")
    overwrite = options.get("overwrite", False)
    if not isinstance(overwrite, bool):
        raise ConfigError(f"{key}.overwrite", f"expected true or false, got {overwrite!r}")
    fields = options.get("fields", ())
    if isinstance(fields, str) or not all(isinstance(f, str) for f in fields):
        raise ConfigError(f"{key}.fields", f"expected a list of names, got {fields!r}")
    spec = FeedSpec(uri=uri, format=kind, overwrite=overwrite, fields=tuple(fields))
    if spec.format == "json" and not spec.overwrite and not spec.stdout:
        raise ConfigError(key, "a JSON array cannot be appended to: use jsonl, or overwrite")
    if spec.format in ("sqlite", "warc") and spec.stdout:
        held = "a SQLite table" if spec.format == "sqlite" else "a WARC file"
        raise ConfigError(key, f"standard output cannot hold {held}")
    if spec.format == "warc" and spec.fields:
        raise ConfigError(f"{key}.fields", "a WARC file holds responses, not fields of items")
    return spec


def _guess_format(key: str, uri: str) -> str:
    if uri in ("-", "stdout:"):
        return "jsonl"
    if uri.startswith("sqlite://"):
        return "sqlite"
    if uri.lower().endswith((".warc", ".warc.gz")):
        return "warc"
    kind = _BY_SUFFIX.get(PurePath(uri).suffix.lower())
    if kind is None:
        raise ConfigError(f"{key}.format", f"cannot tell the format of {uri!r}: name one")
    return kind


def _check_template(key: str, uri: str) -> None:
    """Only the bare placeholders: a format spec (``{spider:>1000000000}``) or a
    conversion (``{spider!r}``) would let a setting size the path, so both are refused."""
    if "\x00" in uri:
        raise ConfigError(key, f"a file name holds no NUL character: {uri!r}")
    try:
        fields = [(n, s, c) for _, n, s, c in string.Formatter().parse(uri) if n is not None]
    except ValueError as exc:
        raise ConfigError(key, f"bad template {uri!r}: {exc}") from exc
    for name, spec, conversion in fields:
        if name not in PLACEHOLDERS:
            raise ConfigError(key, f"unknown placeholder {{{name}}} (known: {PLACEHOLDERS})")
        if spec or conversion:
            raise ConfigError(key, f"a placeholder takes no format spec or conversion: {uri!r}")


def confine(key: str, spec: FeedSpec, root: str) -> FeedSpec:
    """``spec`` as a path under ``root`` (an engine's ``feeds_dir``), or why not: a feed
    asked for over HTTP is relative, has no ``..``, and ends in its format's suffix (so
    it can never be a ``.py`` file or a dot file that something else reads)."""
    if spec.stdout:
        raise ConfigError(key, "over HTTP a feed is a file under engine.feeds_dir, not stdout")
    path = PurePosixPath(spec.path)
    if path.is_absolute() or ".." in path.parts or any(c < " " or c in "\\\x7f" for c in spec.path):
        raise ConfigError(
            key, f"expected a relative path without '..', '\\' or controls, got {spec.path!r}"
        )
    if _BY_SUFFIX.get(path.suffix.lower()) != spec.format:
        suffixes = sorted(s for s, kind in _BY_SUFFIX.items() if kind == spec.format)
        raise ConfigError(key, f"a {spec.format} feed over HTTP ends in one of {suffixes}")
    braced = root.replace("{", "{{").replace("}", "}}")
    scheme = "sqlite://" if spec.uri.startswith("sqlite://") else ""
    uri = scheme + str(PurePosixPath(braced) / path)
    return dataclasses.replace(spec, uri=uri, root=root)


def parse_feeds(key: str, value: Any) -> tuple[FeedSpec, ...]:
    """The ``feeds`` setting: a table of URI -> options (or its JSON text), or specs."""
    if isinstance(value, tuple | list) and all(isinstance(v, FeedSpec) for v in value):
        return tuple(value)
    value = parse_table(key, value, "URI -> options")
    specs = []
    for uri, options in value.items():
        if not isinstance(options, Mapping):
            raise ConfigError(f"{key}.{uri}", f"expected a table of options, got {options!r}")
        specs.append(make_spec(f"{key}.{uri}", uri, options))
    return tuple(specs)


def cli_feed(argument: str, *, overwrite: bool) -> FeedSpec:
    """``-o``/``-O`` ``URI[:FORMAT]`` (``-o items.txt:jsonl``); ``-`` is standard output."""
    uri, sep, kind = argument.rpartition(":")
    if not sep or kind not in FORMATS:
        uri, kind = argument, ""
    flag = "-O" if overwrite else "-o"
    options: dict[str, Any] = {"overwrite": overwrite}
    if kind:
        options["format"] = kind
    return make_spec(f"{flag} {argument}", uri, options)
