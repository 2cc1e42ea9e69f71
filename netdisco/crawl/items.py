"""Items as Scrapy users declare them: ``Item`` with ``Field``s, filled by ``ItemLoader``.

Every item kind is read through itemadapter (Scrapy's own library): dicts, any
mapping, dataclasses, attrs classes, pydantic models and ``Item``s, so that feeds and
schemas see an item's fields, never its ``str()``. ``Item`` is registered with
itemadapter (its documented extension point), so that itemloaders reads the input and
output processors declared in its ``Field``s, as Scrapy's loaders do.
"""

from __future__ import annotations

from abc import ABCMeta
from collections import deque
from collections.abc import Iterator, Mapping, MutableMapping
from copy import deepcopy
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, ClassVar

from itemadapter import ItemAdapter
from itemadapter.adapter import AdapterInterface
from itemloaders import ItemLoader as _BaseLoader

if TYPE_CHECKING:
    from collections.abc import KeysView

    from parsel import Selector

    from netdisco.crawl.response import Response


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


class ItemClassAdapter(AdapterInterface):
    """itemadapter's view of an ``Item``: its values, and its fields' metadata."""

    @classmethod
    def is_item_class(cls, item_class: type) -> bool:
        return isinstance(item_class, type) and issubclass(item_class, Item)

    @classmethod
    def get_field_meta_from_class(
        cls, item_class: type, field_name: str
    ) -> MappingProxyType[str, Any]:
        fields: dict[str, Field] = getattr(item_class, "fields", {})
        return MappingProxyType(fields[field_name])

    @classmethod
    def get_field_names_from_class(cls, item_class: type) -> list[str] | None:
        return list(getattr(item_class, "fields", {}))

    def field_names(self) -> KeysView[str]:
        return self.item.fields.keys()  # type: ignore[no-any-return]

    def __getitem__(self, field_name: str) -> Any:
        return self.item[field_name]

    def __setitem__(self, field_name: str, value: Any) -> None:
        self.item[field_name] = value

    def __delitem__(self, field_name: str) -> None:
        del self.item[field_name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.item)

    def __len__(self) -> int:
        return len(self.item)


_ADAPTERS: deque[type[AdapterInterface]] = ItemAdapter.ADAPTER_CLASSES  # type: ignore[assignment]
if ItemClassAdapter not in _ADAPTERS:
    _ADAPTERS.appendleft(ItemClassAdapter)


def is_item(value: Any) -> bool:
    """Whether ``value`` is an item a feed can write: any mapping, or an object
    itemadapter knows (dataclass, attrs, pydantic, ``Item``)."""
    return isinstance(value, Mapping) or (
        not isinstance(value, type) and ItemAdapter.is_item(value)
    )


def item_dict(value: Any) -> Any:
    """An item's fields as a plain dict (nested items too); anything else as it is."""
    if isinstance(value, type):
        return value
    if ItemAdapter.is_item(value):
        return ItemAdapter(value).asdict()
    if isinstance(value, Mapping):
        return {key: item_dict(inner) for key, inner in value.items()}
    return value


class ItemLoader(_BaseLoader):
    """itemloaders' loader that also takes ``response=`` (its selector), as Scrapy's."""

    default_item_class = Item

    def __init__(
        self,
        item: Any = None,
        selector: Selector | None = None,
        response: Response | None = None,
        parent: _BaseLoader | None = None,
        **context: Any,
    ) -> None:
        if selector is None and response is not None:
            selector = response.selector
        context["response"] = response
        super().__init__(item=item, selector=selector, parent=parent, **context)
