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


#: a Lua script's text, its keys and its arguments
Eval = tuple[str, list[str], list[Any]]


async def eval_replicated(
    redis: Client,
    calls: list[Eval],
    wanted: int,
    confirmations: Confirmations,
    *,
    tries: int = 1,
) -> list[Any]:
    """Each ``EVAL`` of ``calls`` (one slot's), then ``WAIT wanted``, in one pipeline on one
    connection: one round trip. Up to ``tries`` times while fewer replicas confirm them
    (the scripts must be idempotent); their answers."""
    for attempt in range(1, tries + 1):
        answers, replicated = await _eval_and_wait(redis, calls, wanted)
        if replicated >= wanted:
            return answers
        log.debug("frontier_write_retried", replicas=replicated, wanted=wanted, attempt=attempt)
    confirmations.missed += 1
    log.warning("frontier_write_not_replicated", replicas=replicated, wanted=wanted, tries=tries)
    return answers


async def _eval_and_wait(redis: Client, calls: list[Eval], wanted: int) -> tuple[list[Any], int]:
    target = {}
    if isinstance(redis, RedisCluster):
        target = {"target_nodes": redis.get_node_from_key(calls[0][1][0])}
    try:
        async with redis.pipeline(transaction=False) as pipe:
            for script, keys, args in calls:
                pipe.execute_command("EVAL", script, len(keys), *keys, *args, **target)
            if wanted:
                pipe.execute_command("WAIT", wanted, REPLICA_WAIT_MS, **target)
            answers = list(await pipe.execute(raise_on_error=False))
    except RedisClusterException as exc:  # the node went mid-call: the caller asks again
        raise RedisConnectionError(str(exc)) from exc
    raise_first(answers)
    return answers, int(answers.pop()) if wanted else 0


def raise_first(answers: list[Any]) -> list[Any]:
    """A pipeline's answers, or its first error as the command gave it (a script's
    ``LOST`` must reach the frontier as it is, not wrapped by the pipeline)."""
    for answer in answers:
        if isinstance(answer, Exception):
            raise answer
    return answers
