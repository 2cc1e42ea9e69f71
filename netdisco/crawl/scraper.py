"""Step 4 of the data flow: run a callback and sort what it yields.

Requests go back to the scheduler (step 2), everything else is an item for the
item stream (step 5). A callback that raises is counted and logged with the URL;
what it yielded before the error is kept, and the crawl goes on.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import structlog

from netdisco.crawl.context import CrawlContext
from netdisco.crawl.items import is_item
from netdisco.crawl.itemstream import ItemStream
from netdisco.crawl.request import CallbackResult, Request, outputs
from netdisco.crawl.response import Response
from netdisco.crawl.scheduler import Scheduler
from netdisco.exceptions import FrontierFailed, NotAnItem

log = structlog.get_logger(__name__)


class Scraper:
    """Feeds callback output to the scheduler (requests) and the item stream (items)."""

    def __init__(
        self,
        ctx: CrawlContext,
        scheduler: Scheduler,
        items: ItemStream,
    ) -> None:
        self.spider = ctx.spider
        self.stats = ctx.stats
        self.scheduler = scheduler
        self.items = items  # the item chain (``crawl.itemstream``)

    async def scrape(
        self, request: Request, response: Response, keep: list[Request] | None = None
    ) -> None:
        """A page downloaded: counted, and its callback (the spider's ``parse`` unless
        the request names one) run on it; ``keep`` as for ``run``."""
        self.stats.succeeded += 1
        self.stats.pages.add()
        callback = request.callback or self.spider.parse
        if request.cb_kwargs:
            callback = partial(callback, **request.cb_kwargs)
        depth = request.depth + 1
        await self.run(callback, response, url=response.url, depth=depth, keep=keep)

    async def run(
        self,
        callback: Callable[..., CallbackResult],
        *args: Any,
        url: str,
        depth: int = 0,
        keep: list[Request] | None = None,
    ) -> None:
        """Call ``callback(*args)`` and route everything it produces; ``keep`` collects the
        requests (a page's links, for re-crawls). Requests yielded without a depth (built
        by hand, not by ``follow``) get ``depth``, so that ``depth_limit`` holds for them."""
        requests: list[Request] = []
        route = partial(self._route, requests=requests, depth=depth, keep=keep, url=url)
        try:
            async for value in outputs(callback(*args)):
                await route(value)
        except FrontierFailed:  # not the callback's fault: the crawl cannot go on
            raise
        except Exception as exc:  # a spider's bug must not stop the crawl
            self.failed(callback, url, exc)
        finally:
            if requests:
                await self.admit(requests)

    def failed(self, callback: Callable[..., CallbackResult], url: str, exc: Exception) -> None:
        """A callback raised: counted (by exception type in ``spider_errors``, and among
        the crawl's error kinds) and logged with the URL."""
        callback = getattr(callback, "func", callback)  # cb_kwargs' partial: the callback
        name = getattr(callback, "__name__", "?")
        self.stats.spider_error(exc)
        self.stats.error(f"callback {name}: {exc!r}")
        log.error("callback_error", url=url, callback=name, error=repr(exc), exc_info=exc)

    async def admit(self, requests: list[Request]) -> None:
        """Queue a page's links; if the frontier cannot, the crawl cannot go on: a page
        counted failed would be acknowledged, and its links lost with it."""
        try:
            await self.scheduler.admit(requests)
        except FrontierFailed:
            raise
        except Exception as exc:
            raise FrontierFailed(f"the frontier could not queue a page's links: {exc!r}") from exc

    async def _route(
        self,
        value: Any,
        *,
        requests: list[Request],
        depth: int,
        keep: list[Request] | None,
        url: str = "",
    ) -> None:
        if isinstance(value, Request):
            value.depth = value.depth or depth
            requests.append(value)
            if keep is not None:
                keep.append(value)
            if len(requests) >= 256:  # bound the batch for huge pages
                await self.admit(requests[:])
                requests.clear()
        elif value is None:
            return
        elif not is_item(value):
            self._not_an_item(value, url)
        else:
            await self.items.emit(value, url)

    def _not_an_item(self, value: Any, url: str) -> None:
        """Neither a request nor an item: refused (never written as its ``str()``),
        counted among the spider's errors, and the callback's other output kept."""
        kind = type(value)
        exc = NotAnItem(
            f"a callback yielded a {kind.__module__}.{kind.__qualname__} ({value!r:.80}), "
            "neither a Request nor an item (a mapping, dataclass, attrs class, pydantic "
            "model or Item)"
        )
        self.stats.spider_error(exc)
        self.stats.error(f"{url}: {exc}")
        log.error("not_an_item", url=url, type=f"{kind.__module__}.{kind.__qualname__}")
