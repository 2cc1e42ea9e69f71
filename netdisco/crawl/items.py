"""Items as Scrapy users declare them: ``Item`` with ``Field``s, and what counts as an item.

Every item kind is written as its fields: dicts, any mapping, dataclasses, attrs classes,
pydantic models and ``Item``s (never its ``str()``). Other kinds are asked of itemadapter
(Scrapy's own library), imported on first need: it imports pydantic when that is
installed, which a crawl of dicts should not pay for. The first ``Item`` class declared
registers ``Item`` with itemadapter (``netdisco.crawl.itemadapters``), so that
itemloaders and a pipeline's ``ItemAdapter(item)`` read it and its fields' metadata.
"""

from __future__ import annotations

import dataclasses
from abc import ABCMeta
from collections.abc import Iterator, Mapping, MutableMapping
from copy import deepcopy
from functools import cache
from typing import Any, ClassVar

import attrs

#: values that are never items (and never hold one): no adapter is asked about them
_PLAIN = (str, bytes, int, float, bool, type(None))


@cache
def adapter() -> Any:
    """itemadapter's ``ItemAdapter``, with ``Item`` registered (imported on first use)."""
    from netdisco.crawl.itemadapters import registered

    return registered()


class Field(dict[str, Any]):
    """A field of an ``Item``, with its metadata (``input_processor``, ``serializer``...)."""


class ItemMeta(ABCMeta):
    """Collects an ``Item`` class's ``Field`` attributes (its own and inherited) in ``fields``."""

    def __new__(
        mcs, name: str, bases: tuple[type, ...], namespace: dict[str, Any], **kwargs: Any
    ) -> ItemMeta:
        fields: dict[str, Field] = {}
        for base in reversed(bases):
            fields.update(getattr(base, "fields", {}))
        fields.update((key, value) for key, value in namespace.items() if isinstance(value, Field))
        body = {key: value for key, value in namespace.items() if not isinstance(value, Field)}
        cls = super().__new__(mcs, name, bases, body, **kwargs)
        cls.fields = fields  # type: ignore[attr-defined]
        if any(isinstance(base, ItemMeta) for base in bases):  # a user's Item class
            adapter()
        return cls


class Item(MutableMapping[str, Any], metaclass=ItemMeta):
    """A mapping whose keys are the class's declared ``Field``s, as Scrapy's ``Item``:
    setting an undeclared one is a ``KeyError`` naming it."""

    fields: ClassVar[dict[str, Field]] = {}

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._values: dict[str, Any] = {}
        for key, value in dict(*args, **kwargs).items():
            self[key] = value

    def __getitem__(self, key: str) -> Any:
        return self._values[key]

    def __setitem__(self, key: str, value: Any) -> None:
        if key not in self.fields:
            raise KeyError(f"{type(self).__name__} does not support field: {key}")
        self._values[key] = value

    def __delitem__(self, key: str) -> None:
        del self._values[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __getattr__(self, name: str) -> Any:
        if name in self.fields:
            raise AttributeError(f"use item[{name!r}] to get a field's value")
        raise AttributeError(name)

    def __setattr__(self, name: str, value: Any) -> None:
        if not name.startswith("_"):
            raise AttributeError(f"use item[{name!r}] = {value!r} to set a field's value")
        super().__setattr__(name, value)

    def __repr__(self) -> str:
        return repr(self._values)

    def copy(self) -> Item:
        return type(self)(self)

    def deepcopy(self) -> Item:
        return deepcopy(self)


def is_item(value: Any) -> bool:
    """Whether ``value`` is an item a feed can write: any mapping, a dataclass or attrs
    instance, or an object itemadapter knows (a pydantic model...)."""
    if isinstance(value, Mapping) or _is_record(value):
        return True
    return not isinstance(value, (type, *_PLAIN)) and bool(adapter().is_item(value))


def _is_record(value: Any) -> bool:
    return not isinstance(value, type) and (
        dataclasses.is_dataclass(value) or attrs.has(type(value))
    )


def item_dict(value: Any) -> Any:
    """An item's fields as a plain dict (nested items too); anything else as it is."""
    if type(value) is dict or isinstance(value, (type, list, tuple, *_PLAIN)):
        return value
    if isinstance(value, Mapping):
        return {key: item_dict(inner) for key, inner in value.items()}
    if dataclasses.is_dataclass(value):
        return dataclasses.asdict(value)  # type: ignore[arg-type]
    if attrs.has(type(value)):
        return attrs.asdict(value)
    found = adapter()
    return found(value).asdict() if found.is_item(value) else value
