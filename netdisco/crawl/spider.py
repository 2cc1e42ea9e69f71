"""The user's spider: seeds, scope and callbacks (Scrapy-familiar, asyncio-native)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from netdisco.crawl.request import CallbackResult, Request

if TYPE_CHECKING:
    from netdisco.crawl.middleware import Middleware
    from netdisco.crawl.pipelines import Pipeline
    from netdisco.crawl.response import Response


class Spider:
    """Subclass it: set ``name`` and ``start_urls`` (or override ``start``) and ``parse``.

    Callbacks may be plain or async generators (or return a list) yielding items
    (dicts or dataclasses) and ``Request`` objects.
    """

    name: ClassVar[str] = ""
    start_urls: ClassVar[Sequence[str]] = ()
    allowed_domains: ClassVar[Sequence[str]] = ()
    custom_settings: ClassVar[dict[str, Any]] = {}
    #: a dataclass, attrs class or pydantic model that yielded dicts must fit (instances
    #: of such a class are checked against their own); see ``invalid_items``
    item_schema: ClassVar[type | None] = None

    def __init__(self, **kwargs: Any) -> None:
        for key, value in kwargs.items():
            setattr(self, key, value)
        if not self.name:
            self.name = type(self).__name__.lower()  # type: ignore[misc]

    async def start(self) -> AsyncIterator[Request]:
        """The seed requests; by default one per ``start_urls`` entry."""
        for url in self.start_urls:
            yield Request(url, callback=self.parse)

    def parse(self, response: Response) -> CallbackResult:
        """The default callback. Override it."""
        raise NotImplementedError(f"{type(self).__name__}.parse is not defined")

    def on_not_modified(self, response: Response) -> CallbackResult:
        """Called with the 304 response when a revalidated page did not change
        (``recrawl = "conditional"``); what it yields flows as a callback's. By default
        nothing: the stored links are followed anyway, and an unchanged page has no new items.
        """
        return None

    def pipelines(self) -> Sequence[Pipeline]:
        """Item pipelines this spider always uses (in addition to the engine's)."""
        return ()

    def middlewares(self) -> Sequence[Middleware]:
        """Downloader middlewares of this spider, after those the settings enable."""
        return ()
