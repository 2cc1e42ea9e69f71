"""Writes that a failover cannot undo: ``WAIT`` for replicas before the answer counts.

Redis answers a write before its replicas have it, so a master that dies right after
an add can take the add with it while the page that found those links is acknowledged
on another node: the links would be lost for good. A take undone the same way hands
its request and its host's slot to another engine while the first still fetches: a
duplicate, and a host served twice at once. So adds and takes wait, on the same
connection (``WAIT`` counts that connection's writes), until ``replicas`` replicas have
them, for at most ``REPLICA_WAIT_MS``. An add that is still unconfirmed then is sent
again (its token makes that change nothing but re-run the ``WAIT``), a few times: a
master that dies meanwhile is replaced, and the retry lands the links on its
successor before the page that found them is acknowledged. Only then does the crawl go
on, and log it. On a cluster they wait for no more replicas than the slot has (a
promoted replica has none).
"""

from __future__ import annotations

from typing import Any

import structlog
from redis.asyncio.cluster import RedisCluster
from redis.crc import key_slot
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisClusterException

from netdisco.frontiers.redis.leases import Client

log = structlog.get_logger(__name__)

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


async def eval_replicated(
    redis: Client,
    script: str,
    keys: list[str],
    args: list[Any],
    wanted: int,
    confirmations: Confirmations,
    tries: int = 1,
) -> Any:
    """``EVAL script`` then ``WAIT wanted`` on one connection, up to ``tries`` times
    while fewer replicas confirm it (``script`` must be idempotent); its answer."""
    for attempt in range(1, tries + 1):
        answer, replicated = await _eval_and_wait(redis, script, keys, args, wanted)
        if replicated >= wanted:
            return answer
        log.debug("frontier_write_retried", replicas=replicated, wanted=wanted, attempt=attempt)
    confirmations.missed += 1
    log.warning("frontier_write_not_replicated", replicas=replicated, wanted=wanted, tries=tries)
    return answer


async def _eval_and_wait(
    redis: Client, script: str, keys: list[str], args: list[Any], wanted: int
) -> tuple[Any, int]:
    target = {}
    if isinstance(redis, RedisCluster):
        target = {"target_nodes": redis.get_node_from_key(keys[0])}
    try:
        async with redis.pipeline(transaction=False) as pipe:
            pipe.execute_command("EVAL", script, len(keys), *keys, *args, **target)
            pipe.execute_command("WAIT", wanted, REPLICA_WAIT_MS, **target)
            answer, replicated = await pipe.execute(raise_on_error=False)
    except RedisClusterException as exc:  # the node went mid-call: the caller asks again
        raise RedisConnectionError(str(exc)) from exc
    for result in (answer, replicated):  # the script's own error (``LOST``), not wrapped
        if isinstance(result, Exception):  # by the pipeline, so the frontier knows it
            raise result
    return answer, int(replicated)
