"""Item schemas: items checked against their declared class as they are yielded.

A spider declares what its items look like with a dataclass, an attrs class or a
pydantic model (pydantic is never required: a model is known by its ``model_validate``),
either by yielding instances of it or by naming it in ``Spider.item_schema`` (then plain
dicts are checked against it too). Constructing a dataclass checks nothing at run time,
so its fields are checked against their annotations here (typeguard, every element of a
collection); an attrs class also runs its own validators; a pydantic model validates
itself. An invalid item is counted (``items_invalid``, per field) and logged with its
field and reason (the first few per field), then kept, dropped or fails the crawl, as
``invalid_items`` says. The schema's field names are also the columns of a CSV feed.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any

import attrs
import structlog
from typeguard import CollectionCheckStrategy, TypeCheckError, check_type

from netdisco.crawl.stats import Stats
from netdisco.exceptions import ConfigError, InvalidItem

log = structlog.get_logger(__name__)

#: how many invalid items of one field are logged in full; the rest are only counted
LOGGED_PER_FIELD = 3


@dataclass(frozen=True)
class Problem:
    """Why an item is invalid: the field at fault (``""``: the item as a whole) and why."""

    field: str
    reason: str


def is_schema(cls: object) -> bool:
    """Whether ``cls`` is a class items can be checked against."""
    return isinstance(cls, type) and (
        dataclasses.is_dataclass(cls)
        or attrs.has(cls)
        or callable(getattr(cls, "model_validate", None))
    )


def field_names(cls: type) -> list[str]:
    """The schema's fields in declaration order (a CSV feed's columns)."""
    if dataclasses.is_dataclass(cls):
        return [f.name for f in dataclasses.fields(cls)]
    if attrs.has(cls):
        return [a.name for a in attrs.fields(cls)]
    return list(getattr(cls, "model_fields", {}))


def schema_of(item: Any, declared: type | None) -> type | None:
    """The schema ``item`` is checked against: its own class if that is one, else the
    spider's ``item_schema`` for a mapping; None when nothing says what it should be."""
    if is_schema(type(item)):
        return type(item)
    return declared if declared is not None and isinstance(item, Mapping) else None


def check(item: Any, cls: type) -> tuple[Any, list[Problem]]:
    """``item`` as an instance of ``cls`` (built from a mapping) and what is wrong with it."""
    if callable(getattr(cls, "model_validate", None)):
        return _check_model(item, cls)
    values = dict(item) if isinstance(item, Mapping) else _values(item, cls)
    problems = _missing_or_unknown(values, cls)
    for name, hint in _hints(cls).items():
        if name in values:
            problems += _typed(name, values[name], hint)
    if problems or isinstance(item, cls):
        return item, problems
    try:  # attrs validators and converters run here
        return cls(**values), []
    except (TypeError, ValueError) as exc:
        return item, [Problem("", f"{type(exc).__name__}: {exc}")]


def _values(item: Any, cls: type) -> dict[str, Any]:
    return {name: getattr(item, name) for name in field_names(cls)}


def _missing_or_unknown(values: Mapping[str, Any], cls: type) -> list[Problem]:
    required, known = _required(cls), set(field_names(cls))
    problems = [Problem(name, "missing") for name in required if name not in values]
    return problems + [Problem(str(name), "not a field of the schema")
                       for name in values if name not in known]  # fmt: skip


@cache
def _required(cls: type) -> tuple[str, ...]:
    if dataclasses.is_dataclass(cls):
        empty = dataclasses.MISSING
        return tuple(f.name for f in dataclasses.fields(cls)
                     if f.default is empty and f.default_factory is empty and f.init)  # fmt: skip
    return tuple(a.name for a in attrs.fields(cls) if a.default is attrs.NOTHING and a.init)


@cache
def _hints(cls: type) -> dict[str, Any]:
    """The fields' annotations, resolved once per class (string annotations too)."""
    hints = typing.get_type_hints(cls)
    return {name: hints[name] for name in field_names(cls) if name in hints}


def _typed(name: str, value: Any, hint: Any) -> list[Problem]:
    try:
        check_type(value, hint, collection_check_strategy=CollectionCheckStrategy.ALL_ITEMS)
    except TypeCheckError as exc:
        return [Problem(name, str(exc))]
    return []


def _check_model(item: Any, cls: Any) -> tuple[Any, list[Problem]]:
    """A pydantic model validates itself; its errors name their field (``loc``)."""
    try:
        return cls.model_validate(item), []
    except ValueError as exc:  # pydantic's ValidationError is a ValueError
        errors = getattr(exc, "errors", None)
        if not callable(errors):
            return item, [Problem("", str(exc))]
        return item, [Problem(".".join(str(p) for p in e.get("loc", ())), str(e.get("msg")))
                      for e in errors()]  # fmt: skip


class ItemChecker:
    """Checks each yielded item against its schema, counts and logs the invalid ones and
    says what goes on (the item, built from a mapping when a schema declares it)."""

    def __init__(
        self, declared: type | None, mode: str, stats: Stats, fail: Callable[[Exception], None]
    ) -> None:
        if declared is not None and not is_schema(declared):
            raise ConfigError("item_schema", f"{declared!r} is not a dataclass, attrs class "
                              "or pydantic model")  # fmt: skip
        self.declared = declared
        self.mode = mode
        self.stats = stats
        self.fail = fail

    def __call__(self, item: Any, url: str) -> Any | None:
        """The item to emit, or None when it is dropped (or failed the crawl)."""
        cls = schema_of(item, self.declared)
        if cls is None:
            return item
        checked, problems = check(item, cls)
        if not problems:
            return checked
        self._count(problems, url)
        if self.mode == "fail":
            first = problems[0]
            where = f"{first.field or 'item'}: {first.reason}"
            self.fail(InvalidItem(f"an item of {url} does not fit {cls.__name__}: {where}"))
            return None
        return item if self.mode == "keep" else None

    def _count(self, problems: list[Problem], url: str) -> None:
        self.stats.items_invalid += 1
        self.stats.count_error("item invalid")
        for problem in {p.field: p for p in problems}.values():  # one count a field an item
            seen = self.stats.invalid_fields.get(problem.field, 0) + 1
            self.stats.invalid_fields[problem.field] = seen
            if seen <= LOGGED_PER_FIELD:
                log.warning("item_invalid", url=url, field=problem.field, reason=problem.reason,
                            mode=self.mode, more_logged=seen < LOGGED_PER_FIELD)  # fmt: skip
