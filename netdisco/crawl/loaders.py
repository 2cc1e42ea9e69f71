"""``ItemLoader``: itemloaders' loader as Scrapy's (``response=``, ``Item`` by default).

Imported on first use (``netdisco.ItemLoader``): itemloaders and itemadapter are not
needed by a crawl that fills no loader.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from itemloaders import ItemLoader as _BaseLoader

from netdisco.crawl.items import Item, adapter

if TYPE_CHECKING:
    from parsel import Selector

    from netdisco.crawl.response import Response

adapter()  # Item's fields and their processors, known to itemloaders


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
