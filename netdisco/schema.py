"""One way to declare and load settings: every settings class, every source.

A settings class is a frozen keyword-only dataclass deriving from :class:`Section`;
each field is declared with :func:`setting`, which carries its one-line doc, its
section (for the reference), its parser when the declared type alone is not enough,
and its check. :func:`load` is the one loader: TOML tables, environment variables,
command-line ``-s`` pairs and HTTP bodies are each a :class:`Source`, every value goes
through :func:`netdisco.values.convert` (or the field's parser), and the checks run
when the object is built, so a settings object made in code is checked the same way.
Every error is a :class:`~netdisco.exceptions.ConfigError` naming the key as the user
wrote it (``spiders[0].settings.timeout``, ``NETDISCO_TIMEOUT``, ``-s timeout``).
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import re
import typing
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import MISSING, dataclass
from typing import Any, ClassVar, TypeVar

import structlog

from netdisco.exceptions import ConfigError
from netdisco.values import convert

log = structlog.get_logger(__name__)
T = TypeVar("T", bound="Section")
#: a field's check: the problem with a (converted) value, or None when it is fine
Check = Callable[[Any], str | None]
#: a field's parser: ``(key, raw value) -> value``, raising ConfigError naming ``key``
Parser = Callable[[str, Any], Any]


def setting(
    default: Any = MISSING,
    *,
    doc: str,
    section: str = "",
    check: Check | None = None,
    parse: Parser | None = None,
    required: str = "",
    loaded: bool = True,
    shown: bool = True,
    compared: bool = True,
) -> Any:
    """A settings field: its default, one-line ``doc``, ``section``, ``parse`` and ``check``.

    ``required`` (for fields without a default) is the hint an absent value gets;
    ``loaded=False`` marks a value no source may set (a secret read from the variable
    another field names); ``shown=False`` keeps it out of ``repr``, ``compared=False``
    out of ``==``.
    """
    metadata = {"doc": doc, "section": section, "check": check, "parse": parse,
                "required": required, "loaded": loaded}  # fmt: skip
    return dataclasses.field(default=default, repr=shown, compare=compared, metadata=metadata)


@dataclass(frozen=True, kw_only=True)
class Section:
    """Base of every settings class: its fields are checked whenever one is built."""

    #: how a key of this class is named in errors (``"engine."`` -> ``engine.port``)
    PREFIX: ClassVar[str] = ""
    #: keys not read (renamed, or another tool's with no counterpart), and what to write
    #: instead: the error a user gets
    RENAMED: ClassVar[Mapping[str, str]] = {}
    #: another tool's names accepted for a key (Scrapy's ``DOWNLOAD_DELAY``): alias ->
    #: (key, how the key's meaning differs, or ""); using one logs a note naming the key
    ALIASES: ClassVar[Mapping[str, tuple[str, str]]] = {}
    #: another tool's keys that have nothing to do here (Scrapy's ``TWISTED_REACTOR``):
    #: accepted with a one-line note saying why, and not read
    IGNORED: ClassVar[Mapping[str, str]] = {}
    #: what an unknown key is called in its error ("unknown key", "unknown setting")
    KIND: ClassVar[str] = "key"

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            check = f.metadata.get("check")
            value = getattr(self, f.name)
            problem = None if check is None or value is None else check(value)
            if problem is not None:
                raise ConfigError(self.PREFIX + f.name, problem)
        self.check()

    def check(self) -> None:
        """Checks across fields (one field's own are on the field); raise ConfigError."""


@dataclass(frozen=True)
class Source:
    """One layer of values: a TOML table, the environment, ``-s`` pairs, an HTTP body.

    ``name`` formats a key the way the user wrote it (``"NETDISCO_{KEY}"``,
    ``"-s {key}"``); ``text=False`` is for typed sources, where a string is only
    accepted for a string setting (``timeout = "10"`` in TOML is an error).
    """

    values: Mapping[str, Any]
    name: str = "{key}"
    text: bool = True

    def key(self, cls: type[Section], name: str) -> str:
        key = cls.PREFIX + name
        return self.name.replace("{key}", key).replace("{KEY}", key.upper().replace(".", "_"))


def loadable(cls: type[Section]) -> tuple[str, ...]:
    """The keys a source may set, in declaration order."""
    return tuple(f.name for f in dataclasses.fields(cls) if f.metadata.get("loaded", True))


def load(
    cls: type[T],
    *sources: Source,
    base: T | None = None,
    keys: Collection[str] | None = None,
    given: Mapping[str, Any] | None = None,
) -> T:
    """``cls`` from ``sources`` (later ones win) over ``base`` or the defaults.

    ``keys`` narrows what the sources may set (``[zookeeper]`` of a monitor);
    ``given`` are values from the program, under the sources (a default that depends
    on another section, a secret read from a variable).
    """
    known = loadable(cls) if keys is None else tuple(keys)
    values: dict[str, Any] = dict(given or {})
    origin: dict[str, Source] = {}
    errors: list[ConfigError] = []
    for source in sources:
        for written, raw in source.values.items():
            if written in cls.IGNORED and written not in known:
                _note_ignored(cls, source.key(cls, written), cls.IGNORED[written])
                continue
            try:  # every key's problem is said, not only the first one's
                name = _known(cls, source, written, known)
                values[name] = _parse(cls, name, raw, source, written)
            except ConfigError as exc:
                errors.append(exc)
                continue
            origin[name] = source
    if errors:
        raise ConfigError.together(errors)
    try:
        if base is not None:
            return dataclasses.replace(base, **values)
        _required(cls, values)
        return cls(**values)
    except ConfigError as exc:
        raise _named(cls, exc, origin) from None


def from_environ(
    cls: type[Section],
    environ: Mapping[str, str],
    variable: str,
    *,
    name: str | None = None,
    keys: Iterable[str] | None = None,
) -> Source:
    """The variables of ``environ`` named after ``cls``'s keys (``variable``:
    ``"NETDISCO_{KEY}"``); errors name the variable, or ``name`` if given.
    A variable of a renamed key is refused, naming the new one."""
    pattern = Source({}, variable)
    for old, instead in cls.RENAMED.items():
        if pattern.key(cls, old) in environ:
            raise ConfigError(pattern.key(cls, old), instead)
    found = {}
    wanted = loadable(cls) if keys is None else tuple(keys)
    aliases = [alias for alias, (key, _) in cls.ALIASES.items()
               if key in wanted and pattern.key(cls, alias) != pattern.key(cls, key)]  # fmt: skip
    for key in (*wanted, *aliases):
        if pattern.key(cls, key) in environ:
            found[key] = environ[pattern.key(cls, key)]
    return Source(found, variable if name is None else name)


_NOTED: set[tuple[str, str]] = set()  # aliases noted already (settings load more than once)


def _note_ignored(cls: type[Section], key: str, why: str) -> None:
    if (key, "") not in _NOTED:
        _NOTED.add((key, ""))
        log.warning("setting_ignored", key=key, why=why)


def _known(cls: type[Section], source: Source, name: str, known: Collection[str]) -> str:
    """The key ``name`` sets (itself, or the key an alias stands for); or why none."""
    if name in known:
        return name
    key = source.key(cls, name)
    if name in cls.ALIASES and cls.ALIASES[name][0] in known:
        target, differs = cls.ALIASES[name]
        if (key, target) not in _NOTED:
            _NOTED.add((key, target))
            log.warning("setting_alias", key=key, use=cls.PREFIX + target, differs=differs or None)
        return target
    if name in cls.RENAMED:
        raise ConfigError(key, cls.RENAMED[name])
    raise ConfigError(key, f"unknown {cls.KIND}{_suggest(cls, name, known)}")


def _suggest(cls: type[Section], name: str, known: Collection[str]) -> str:
    """``; did you mean download_delay?``: the closest keys, aliases' keys included."""
    candidates = {key: key for key in known}
    for alias, (target, _) in cls.ALIASES.items():
        if target in known:
            candidates.setdefault(alias.lower(), target)
    wanted = name.lower()
    close = difflib.get_close_matches(wanted, candidates, n=3, cutoff=0.6)
    best = difflib.SequenceMatcher(None, wanted, close[0]).ratio() if close else 0.0
    near = [m for m in close if difflib.SequenceMatcher(None, wanted, m).ratio() > best - 0.05]
    names = list(dict.fromkeys(cls.PREFIX + candidates[match] for match in near))
    if not names:
        return " (docs/configuration.md lists every one)"
    return f"; did you mean {' or '.join(names)}?"


def _parse(cls: type[Section], name: str, raw: Any, source: Source, written: str) -> Any:
    key = source.key(cls, written)
    parse = _fields_of(cls)[name].metadata.get("parse")
    if parse is not None:
        return parse(key, raw)
    return convert(key, raw, _types_of(cls)[name], text=source.text)


def _required(cls: type[Section], values: Mapping[str, Any]) -> None:
    for f in dataclasses.fields(cls):
        absent = f.default is MISSING and f.default_factory is MISSING
        if absent and f.name not in values:
            hint = f.metadata.get("required") or "is required"
            raise ConfigError(cls.PREFIX + f.name, hint)


def _named(cls: type[Section], exc: ConfigError, origin: Mapping[str, Source]) -> ConfigError:
    """A check's error, naming the key in the source its value came from."""
    name = exc.key.removeprefix(cls.PREFIX)
    source = origin.get(name)
    if source is None or source.key(cls, name) == exc.key:
        return exc
    return ConfigError(source.key(cls, name), str(exc).removeprefix(f"{exc.key}: "))


_HINTS: dict[type, dict[str, Any]] = {}


def _fields_of(cls: type) -> dict[str, dataclasses.Field[Any]]:
    return {f.name: f for f in dataclasses.fields(cls)}


def _types_of(cls: type) -> dict[str, Any]:
    """The declared (evaluated) type of every field (evaluated once per class)."""
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls)
    return _HINTS[cls]


# -- checks ---------------------------------------------------------------------------


def _finite(value: Any) -> str | None:
    if isinstance(value, float) and not math.isfinite(value):
        return f"must be a finite number, got {value!r}"
    return None


def positive(value: Any) -> str | None:
    """A number greater than 0."""
    return _finite(value) or (None if value > 0 else f"must be greater than 0, got {value!r}")


def non_negative(value: Any) -> str | None:
    """A number of 0 or more."""
    return _finite(value) or (None if value >= 0 else f"must not be negative, got {value!r}")


def within(low: float, high: float, problem: str) -> Check:
    """A number from ``low`` to ``high``; ``problem`` says so otherwise."""
    return lambda value: _finite(value) or (None if low <= value <= high else problem)


def one_of(*choices: str, problem: str | None = None) -> Check:
    """One of ``choices``; ``problem`` (or a list of them) otherwise."""
    said = problem or f"expected {' or '.join(choices)}"
    return lambda value: None if value in choices else f"{said}, got {value!r}"


def each(check: Check) -> Check:
    """Every item of a tuple passes ``check``; the first that does not is named."""
    return lambda values: next((p for p in map(check, values) if p is not None), None)


def port(value: int) -> str | None:
    """A TCP port, 0 (any free one) included."""
    return None if 0 <= value <= 65535 else f"must be between 0 and 65535, got {value!r}"


# -- the reference ----------------------------------------------------------------------


def reference(cls: type[Section], *, sections: Iterable[str] = (), title: str = "") -> str:
    """A Markdown reference of ``cls``'s settings: name, type, default and doc by section.

    ``sections`` orders them (those not named follow); docs/configuration.md is made
    of these tables, and a test keeps it equal to what the code declares.
    """
    hints = _types_of(cls)
    grouped: dict[str, list[dataclasses.Field[Any]]] = {name: [] for name in sections}
    for f in dataclasses.fields(cls):
        if f.metadata.get("loaded", True):
            grouped.setdefault(f.metadata.get("section", ""), []).append(f)
    lines = [f"### {title}", ""] if title else []
    several = sum(1 for members in grouped.values() if members) > 1
    for section, members in grouped.items():
        if not members:
            continue
        if section and several:
            lines += [f"#### {section}", ""]
        lines += ["| name | type | default | |", "|---|---|---|---|"]
        for f in members:
            doc = f.metadata.get("doc", "").replace("|", "\\|")
            lines.append(f"| `{f.name}` | {_type_name(hints[f.name])} | {_default(f)} | {doc} |")
        lines.append("")
    return "\n".join(lines)


def _type_name(kind: Any) -> str:
    text = str(kind) if typing.get_origin(kind) else getattr(kind, "__name__", str(kind))
    text = re.sub(r"\b[a-z_]+\.(?=[A-Za-z_]+\b)", "", text)  # typing.X, pathlib.Path
    return f"`{text.replace('typing.', '').replace('NoneType', 'None')}`".replace("|", "\\|")


def _default(f: dataclasses.Field[Any]) -> str:
    if f.default is MISSING:
        return "required" if f.default_factory is MISSING else f"`{f.default_factory()!r}`"
    value = f.default
    if isinstance(value, frozenset):
        value = sorted(str(v) for v in value)
    return f"`{value!r}`".replace("|", "\\|")
