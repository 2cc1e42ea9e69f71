"""Frontiers: where one crawl's requests wait, in this process or shared by engines.

``open_frontier`` turns a ``frontier`` setting into a frontier: ``memory`` (the
default, :mod:`netdisco.frontiers.memory`) or a ``redis://`` URL
(:mod:`netdisco.frontiers.redis`, several engines on one crawl). This layer sits
below the crawl: it queues anything with a fingerprint and a priority
(:class:`~netdisco.frontiers.base.Queued`) and never imports ``netdisco.crawl``.
"""

from __future__ import annotations

from netdisco.frontiers.base import Claims, Codec, Connected, Frontier, Queued, R
from netdisco.frontiers.memory import MemoryFrontier

__all__ = ["Claims", "Codec", "Connected", "Frontier", "MemoryFrontier", "Queued", "open_frontier"]


def open_frontier(url: str, name: str, codec: Codec[R], *, owner: str | None = None) -> Frontier[R]:
    """The frontier ``url`` names for the crawl ``name``; ``owner`` labels our leases."""
    if url.startswith("memory"):
        return MemoryFrontier()
    from netdisco.frontiers.redis.frontier import RedisFrontier  # redis-py only when asked
    from netdisco.frontiers.redis.options import RedisOptions

    return RedisFrontier(RedisOptions.from_url(url), name, codec, owner=owner)
