"""The user's spider: seeds, scope and callbacks (Scrapy-familiar, asyncio-native)."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import structlog

from netdisco.crawl.request import CallbackResult, Request, outputs

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

    @property
    def logger(self) -> Any:
        """A structlog logger bound to the spider's name (Scrapy's ``Spider.logger``)."""
        return structlog.get_logger(f"spider.{self.name}").bind(spider=self.name)

    def log(self, message: str, level: int = logging.DEBUG, **fields: Any) -> None:
        """Log ``message`` at ``level`` (a ``logging`` level), as Scrapy's ``Spider.log``."""
        self.logger.log(level, message, **fields)

    async def start(self) -> AsyncIterator[Request]:
        """The seed requests; by default one per ``start_urls`` entry, or what a Scrapy
        spider's ``start_requests`` yields when it defines that and not ``start``."""
        start_requests = getattr(self, "start_requests", None)
        if callable(start_requests):
            async for value in outputs(start_requests()):
                yield value
            return
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

    def closed(self, reason: str) -> CallbackResult:
        """Called once when the crawl ends, with why: ``finished``, ``shutdown`` (stopped)
        or ``failed``. Nothing by default; may be a coroutine."""
        return None

    def pipelines(self) -> Sequence[Pipeline]:
        """Item pipelines this spider always uses (in addition to the engine's)."""
        return ()

    def middlewares(self) -> Sequence[Middleware]:
        """Downloader middlewares of this spider, after those the settings enable."""
        return ()
