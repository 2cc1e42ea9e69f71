"""The failed store of a shared crawl: every engine's failures, beside the crawl's queue.

Four keys under the crawl's hash tag (shard 0's, named by the frontier's ``Keys``):
``failed``, a hash of record id -> ``{"record": ..., "body": ...}`` (the record's JSON
and the request as the codec wrote it); ``failed_order``, a sorted set of the ids by
the order they failed; ``failed_seq``, that order's counter; ``failed_dropped``, how
many were dropped to stay within ``keep``. Keeping and taking are scripts, so that
two engines retrying at once never queue one request twice. Calls are bounded by
``CALL_TIMEOUT``: an API request waits that long for Redis, not for ever as the
crawl does.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from typing import Any

from netdisco.frontiers import failed as store
from netdisco.frontiers.failed import FailedPage, FailedRecord
from netdisco.frontiers.redis.leases import Client, Keys

#: the longest one call on the failed store waits for Redis
CALL_TIMEOUT = 5.0

#: KEYS failed, order, seq, dropped; ARGV id, value, keep -> how many are kept
KEEP_LUA = """
local seq = redis.call('INCR', KEYS[3])
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('ZADD', KEYS[2], seq, ARGV[1])
local count = redis.call('ZCARD', KEYS[2])
local extra = count - tonumber(ARGV[3])
if extra > 0 then
  local old = redis.call('ZPOPMIN', KEYS[2], extra)
  for i = 1, #old, 2 do redis.call('HDEL', KEYS[1], old[i]) end
  redis.call('INCRBY', KEYS[4], extra)
  count = count - extra
end
return count
"""

#: KEYS failed, order; ARGV ids -> the values of those still there, removed
TAKE_LUA = """
local taken = {}
for _, id in ipairs(ARGV) do
  local value = redis.call('HGET', KEYS[1], id)
  if value then
    redis.call('HDEL', KEYS[1], id)
    redis.call('ZREM', KEYS[2], id)
    taken[#taken + 1] = value
  end
end
return taken
"""


class RedisFailed:
    """The failed store on a Redis frontier's client (``keys``: its shard 0)."""

    def __init__(self, redis: Client, keys: Keys, codec: Any) -> None:
        self._redis = redis
        self._codec = codec
        self.failed, self.order = keys._key("failed"), keys._key("failed_order")
        self.seq, self.dropped = keys._key("failed_seq"), keys._key("failed_dropped")
        self._keep = redis.register_script(KEEP_LUA)
        self._take = redis.register_script(TAKE_LUA)

    async def keep(self, request: Any, record: FailedRecord, keep: int) -> int:
        """Keep ``record`` with its request; how many the crawl keeps now."""
        body = store.encoded(self._codec, request)
        value = json.dumps({"record": record.bounded().to_json(), "body": body})
        keys = [self.failed, self.order, self.seq, self.dropped]
        async with asyncio.timeout(CALL_TIMEOUT):
            count = await self._keep(keys=keys, args=[record.id, value, max(keep, 0)])
        return int(count)

    async def page(self, reason: str | None, offset: int, limit: int) -> FailedPage:
        """A listing, oldest first, over every engine's failures."""
        entries, dropped = await self._entries()
        records = store.decode_records([entry.get("record") for entry in entries])
        return store.page_of(records, reason, offset, limit, int(dropped or 0))

    async def take(self, reason: str | None, ids: Sequence[str] | None) -> list[Any]:
        """Remove the selected failures; the requests of those this call removed."""
        entries, _ = await self._entries()
        records = store.decode_records([entry.get("record") for entry in entries])
        chosen = [r.id for r in records if store.selected(r, reason, ids)]
        if not chosen:
            return []
        async with asyncio.timeout(CALL_TIMEOUT):
            taken = await self._take(keys=[self.failed, self.order], args=chosen)
        return store.decoded(self._codec, [str(_entry(value).get("body") or "") for value in taken])

    async def _entries(self) -> tuple[list[dict[str, Any]], Any]:
        async with asyncio.timeout(CALL_TIMEOUT):
            ids: list[Any] = list(await self._redis.zrange(self.order, 0, -1))
            values = await self._redis.hmget(self.failed, ids) if ids else []
            dropped = await self._redis.get(self.dropped)
        return [_entry(v) for v in values if v is not None], dropped


def _entry(value: Any) -> dict[str, Any]:
    """One stored value as a dict; garbage (a foreign writer) as an empty one."""
    try:
        data = json.loads(value)
    except (ValueError, TypeError):
        return {}
    return data if isinstance(data, dict) else {}
