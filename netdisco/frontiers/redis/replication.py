"""Writes that a failover cannot undo: ``WAIT`` for replicas before the answer counts.

Redis answers a write before its replicas have it, so a master that dies right after
an add can take the add with it while the page that found those links is acknowledged
on another node: the links would be lost for good. A take undone the same way hands
its request to another engine while the first still fetches: a duplicate. So adds and
takes (``wait=all``) are followed, on the same connection (``WAIT`` counts that
connection's writes), by a ``WAIT`` for ``replicas`` replicas, for at most
``REPLICA_WAIT_MS`` (``owned.OwnedFrontier._run``). An add still unconfirmed then is
sent again (its seen set makes that queue nothing twice), a few times: a master that
dies meanwhile is replaced, and the retry lands the links on its successor before the
page that found them is acknowledged. Only then does the crawl go on, and log it. On a
cluster they wait for no more replicas than the slot has (a promoted replica has none).
"""

from __future__ import annotations

from redis.asyncio.cluster import RedisCluster
from redis.crc import key_slot

from netdisco.frontiers.redis.leases import Client

#: how long an add waits for its replicas (ms)
REPLICA_WAIT_MS = 200


def replicas_for(redis: Client, key: str, wanted: int) -> int:
    """How many replicas a write to ``key``'s slot waits for."""
    if wanted and isinstance(redis, RedisCluster):
        nodes = redis.nodes_manager.slots_cache.get(key_slot(key.encode()), [])
        wanted = min(wanted, len(nodes) - 1)
    return max(wanted, 0)


class Confirmations:
    """Counts writes fewer replicas confirmed than wanted: a caller that sees the count
    move during its call must not trust what it wrote then to outlive a failover."""

    def __init__(self) -> None:
        self.missed = 0
