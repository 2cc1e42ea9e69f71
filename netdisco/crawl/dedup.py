"""Once per key across every engine: a pipeline wrapper for sinks that mind duplicates.

A shared frontier is at-least-once: a page whose engine died mid-request is
fetched again, so its items come twice. ``DedupPipeline`` lets an item through
to the wrapped pipeline only the first time any engine shows its key (one
``SET NX`` in Redis, optionally expiring), and drops the others with ``DropItem``.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from netdisco.crawl.pipelines import Pipeline
from netdisco.exceptions import DropItem
from netdisco.frontiers.redis.leases import Client
from netdisco.frontiers.redis.options import RedisOptions, connect


class DedupPipeline(Pipeline):
    """Passes each item to ``inner`` unless an item with the same ``key`` passed before.

    The key is marked before ``inner`` runs and unmarked if it fails, so a failed
    write can be retried by the next copy. ``inner`` must take single items (no
    buffering operators): wrap the buffering pipeline's input, not its batches.
    """

    def __init__(
        self,
        inner: Pipeline,
        redis_url: str,
        *,
        key: Callable[[Any], str],
        namespace: str = "items",
        ttl: float | None = None,
    ) -> None:
        if inner.operators:
            raise ValueError("DedupPipeline needs an inner pipeline without operators")
        options = RedisOptions.from_url(redis_url)
        self.inner = inner
        self.key = key
        self.ttl = ttl
        self._prefix = f"{options.prefix}:{namespace}:"
        self._url = options.url
        self._redis: Client | None = None

    async def open(self) -> None:
        self._redis = connect(self._url)
        await self.inner.open()

    async def process(self, item: Any) -> Any:
        if self._redis is None:
            raise RuntimeError("DedupPipeline.process called before open()")
        name = self._prefix + self.key(item)
        ttl_ms = None if self.ttl is None else int(self.ttl * 1000)
        if not await self._redis.set(name, 1, nx=True, px=ttl_ms):
            raise DropItem(f"duplicate item {name!r}")
        try:
            result = self.inner.process(item)
            if inspect.isawaitable(result):
                result = await result
        except BaseException:
            await self._redis.delete(name)
            raise
        return result

    async def close(self) -> None:
        await self.inner.close()
        if self._redis is not None:
            await self._redis.aclose()
