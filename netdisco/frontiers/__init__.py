"""Frontiers: where one crawl's requests wait, in this process or shared by engines.

``open_frontier`` turns a ``frontier`` setting into a frontier: ``memory`` (the
default, :mod:`netdisco.frontiers.memory`) or a ``redis://`` URL
(:mod:`netdisco.frontiers.redis`, several engines on one crawl). This layer sits
below the crawl: it queues anything with a fingerprint and a priority
(:class:`~netdisco.frontiers.base.Queued`) and never imports ``netdisco.crawl``.
"""

from __future__ import annotations

from netdisco.frontiers.base import (
    Claims,
    Codec,
    Connected,
    Frontier,
    HostReserving,
    Queued,
    R,
    SharedRobots,
)
from netdisco.frontiers.memory import MemoryFrontier

__all__ = [
    "Claims",
    "Codec",
    "Connected",
    "Frontier",
    "HostReserving",
    "MemoryFrontier",
    "Queued",
    "SharedRobots",
    "open_frontier",
]


def open_frontier(url: str, name: str, codec: Codec[R], *, owner: str | None = None) -> Frontier[R]:
    """The frontier ``url`` names for the crawl ``name``; ``owner`` labels our leases."""
    if url.startswith("memory"):
        return MemoryFrontier()
    from netdisco.frontiers.redis.frontier import RedisFrontier  # redis-py only when asked
    from netdisco.frontiers.redis.hosts import HostQueueFrontier
    from netdisco.frontiers.redis.options import RedisOptions

    options = RedisOptions.from_url(url)
    kind = HostQueueFrontier if options.politeness == "cluster" else RedisFrontier
    return kind(options, name, codec, owner=owner)
