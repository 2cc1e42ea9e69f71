"""On-demand crawls: an application asks its engine to crawl some URLs and gets their items.

``SpiderEngine.crawl`` adds a spider of its own for each call (a unique name: the
class's name and a short random suffix), whose start URLs are the call's and whose
items go to that call's list only, so calls made at once never mix their items. The
``CrawlHandle`` it returns is awaited for a ``CrawlResult``: the end state, the items,
the pages fetched and the errors by type. Once awaited, the spider is removed from
the engine (``keep=True`` leaves it listed), so an application that crawls on every
request does not grow the engine's spider list.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Generator, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from netdisco.crawl.arguments import make_spider
from netdisco.crawl.crawler import TERMINAL, Crawler, SpiderState
from netdisco.crawl.pipelines import CallablePipeline
from netdisco.exceptions import ConfigError, UnknownSpider

if TYPE_CHECKING:
    from netdisco.crawl.pipelines import Pipeline
    from netdisco.crawl.settings import Settings
    from netdisco.crawl.spider import Spider
    from netdisco.engine.engine import SpiderEngine  # which imports this module: types only

#: how many URLs one on-demand crawl may be given (a bad caller's list stays bounded)
MAX_URLS = 10_000


@dataclass(frozen=True)
class CrawlResult:
    """How an on-demand crawl ended: ``state`` (``finished`` unless it failed or was
    stopped), its ``items`` in the order they were passed on, ``pages`` fetched, and
    ``errors`` counted by type (callbacks, pipelines, the spider's ``start``)."""

    name: str
    state: SpiderState
    items: list[Any] = field(default_factory=list)
    pages: int = 0
    errors: dict[str, dict[str, int]] = field(default_factory=dict)
    failure: str | None = None

    @property
    def ok(self) -> bool:
        """Finished, and no callback or pipeline raised."""
        return self.state is SpiderState.FINISHED and not any(self.errors.values())


class CrawlHandle:
    """One on-demand crawl under way: ``await handle`` for its ``CrawlResult``."""

    def __init__(self, engine: SpiderEngine, crawler: Crawler, items: list[Any], keep: bool):
        self._engine = engine
        self.crawler = crawler
        self.name = crawler.name
        #: the items so far, filled as the crawl passes them on (read it while it runs)
        self.items = items
        self._keep = keep

    async def result(self) -> CrawlResult:
        """Wait for the crawl to end; then the spider leaves the engine unless kept."""
        await self._ended()
        state = self.crawler.state
        if state is not SpiderState.IDLE:  # one never started (the engine stopped first) is
            state = await self.crawler.wait()  # left idle; any other closes to the end
        if not self._keep and state in TERMINAL:
            with contextlib.suppress(UnknownSpider):  # awaited twice, or removed already
                self._engine.remove_spider(self.name)
        stats = self.crawler.stats
        failure = self.crawler.failure
        return CrawlResult(
            name=self.name,
            state=state,
            items=list(self.items),
            pages=stats.succeeded,
            errors=stats.errors_by_type(),
            failure=None if failure is None else repr(failure),
        )

    async def _ended(self) -> None:
        """Until the crawl has ended, or the engine stopped before it could start it."""
        waits = [
            asyncio.ensure_future(self.crawler.phase.ended()),
            asyncio.ensure_future(self._engine.stopped()),
        ]
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for wait in waits:
                wait.cancel()
            await asyncio.gather(*waits, return_exceptions=True)

    def __await__(self) -> Generator[Any, None, CrawlResult]:
        return self.result().__await__()


def on_demand(
    engine: SpiderEngine,
    spider: type[Spider],
    urls: Iterable[str],
    settings: Settings | Mapping[str, Any] | None,
    pipelines: Sequence[Pipeline],
    args: Mapping[str, str] | None,
    keep: bool,
) -> CrawlHandle:
    """Add a uniquely named spider that crawls ``urls`` and keeps its items apart."""
    if not isinstance(spider, type):
        raise ConfigError("spider", "engine.crawl() takes a spider class (one run per call)")
    seeds = list(urls)
    if not seeds or len(seeds) > MAX_URLS:
        raise ConfigError("urls", f"expected 1 to {MAX_URLS} URLs, got {len(seeds)}")
    if not all(isinstance(url, str) for url in seeds):
        raise ConfigError("urls", "every URL must be a string")
    instance = make_spider(spider, args)
    base = instance.name or spider.__name__.lower()
    instance.name = f"{base}-{uuid.uuid4().hex[:8]}"  # type: ignore[misc]
    instance.start_urls = seeds  # type: ignore[misc]
    items: list[Any] = []
    collect = CallablePipeline(items.append)
    crawler = engine.add_spider(instance, settings, pipelines=[*pipelines, collect])
    return CrawlHandle(engine, crawler, items, keep)
