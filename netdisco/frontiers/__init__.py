"""Frontiers: where one crawl's requests wait, in this process or shared by engines.

``open_frontier`` turns the ``frontier`` and ``state_dir`` settings into a frontier:
``memory`` (the default, :mod:`netdisco.frontiers.memory`), ``memory`` with a
``state_dir`` (:mod:`netdisco.frontiers.sqlite`, a crawl that resumes after a stop or
a crash) or a ``redis://`` or ``redis+cluster://`` URL (:mod:`netdisco.frontiers.redis`,
several engines on one crawl). This layer sits
below the crawl: it queues anything with a fingerprint and a priority
(:class:`~netdisco.frontiers.base.Queued`) and never imports ``netdisco.crawl``.
"""

from __future__ import annotations

import hashlib
from urllib.parse import urlsplit

from netdisco.frontiers.base import Codec, Frontier, PageStore, Queued, R
from netdisco.frontiers.memory import MemoryFrontier

__all__ = [
    "Codec",
    "Frontier",
    "MemoryFrontier",
    "PageStore",
    "Queued",
    "crawl_identity",
    "is_shared",
    "open_frontier",
]


#: URL schemes of frontiers that engines share (Redis over TCP, TLS or a Unix socket, or
#: a Redis Cluster)
SHARED_SCHEMES = ("redis://", "rediss://", "unix://", "redis+cluster://", "rediss+cluster://")


def is_shared(url: str) -> bool:
    """Whether the frontier ``url`` names is one crawl shared by several engines."""
    return url.startswith(SHARED_SCHEMES)


def crawl_identity(url: str, name: str) -> str | None:
    """A short, stable name of the shared crawl ``url`` and ``name`` open (the Redis
    server and database, the key prefix, the spider), the same on every engine that
    shares it and nothing secret; None for a frontier of this process only."""
    if not is_shared(url):
        return None
    from netdisco.frontiers.redis.options import RedisOptions

    parts = urlsplit(url)
    hosts = parts.netloc.rpartition("@")[2].lower()  # no user, no password
    where = f"{parts.scheme}://{hosts}{parts.path}"
    text = "\n".join((where, RedisOptions.from_url(url).prefix, name))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def open_frontier(
    url: str,
    name: str,
    codec: Codec[R],
    *,
    owner: str | None = None,
    state_dir: str | None = None,
    memory_queue_limit: int = 0,
) -> Frontier[R]:
    """The frontier ``url`` names for the crawl ``name``; ``owner`` labels our leases.

    ``state_dir`` keeps a standalone (``memory``) crawl in SQLite there, so it resumes;
    without one, its queue spills to a temporary file beyond ``memory_queue_limit``.
    """
    if not is_shared(url):
        if state_dir:
            from netdisco.frontiers.sqlite import SqliteFrontier

            return SqliteFrontier(state_dir, name, codec)
        return MemoryFrontier(codec, limit=memory_queue_limit)
    from netdisco.frontiers.redis.frontier import RedisFrontier  # redis-py only when asked
    from netdisco.frontiers.redis.options import RedisOptions
    from netdisco.frontiers.redis.owned import OwnedFrontier

    options = RedisOptions.from_url(url)
    if options.politeness == "owner":
        return OwnedFrontier(options, name, codec, owner=owner)
    return RedisFrontier(options, name, codec, owner=owner)
