"""``Item`` registered with itemadapter: its documented extension point (an adapter class
first in ``ItemAdapter.ADAPTER_CLASSES``), so that itemloaders reads the input and output
processors declared in an ``Item``'s ``Field``s, as Scrapy's loaders do."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator, KeysView
from types import MappingProxyType
from typing import Any

from itemadapter import ItemAdapter
from itemadapter.adapter import AdapterInterface

from netdisco.crawl.items import Field, Item


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


def registered() -> type[ItemAdapter]:
    """``ItemAdapter``, with ``ItemClassAdapter`` registered (once)."""
    adapters: deque[type[AdapterInterface]] = ItemAdapter.ADAPTER_CLASSES  # type: ignore[assignment]
    if ItemClassAdapter not in adapters:
        adapters.appendleft(ItemClassAdapter)
    return ItemAdapter
