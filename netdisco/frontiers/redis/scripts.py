"""The Lua scripts of the Redis frontier: each operation is one atomic script.

Atomic, so two engines never take the same request and a crash between two
commands cannot lose one. Key layout: ``netdisco.frontiers.redis.leases.Keys``.
"""

from __future__ import annotations

from netdisco.frontiers.redis.leases import NOW_LUA, REQUEUE_LUA

#: the error a script answers when the crawl's epoch key is not the one the engine joined
LOST = "NETDISCO_LOST"


def _fenced(key: int, arg: int) -> str:
    """Lua that refuses to run on a crawl other than ours: Redis lost it (restart without
    persistence, FLUSHALL) or it was created anew. Checked before any write."""
    return (
        f"local epoch = redis.call('GET', KEYS[{key}])\n"
        f"if epoch ~= ARGV[{arg}] then return redis.error_reply('{LOST} ' .. tostring(epoch)) end\n"
    )


#: marks one seen key (a fingerprint, or Bloom offsets) in the seen set: true if it was new
MARK_SEEN_LUA = """
local function mark_seen(mode, key, seen, seen_count)
  if mode == 'bloom' then
    local new = false
    for off in string.gmatch(key, '%d+') do
      if redis.call('SETBIT', seen, off, 1) == 0 then new = true end
    end
    if new then redis.call('INCR', seen_count) end
    return new
  end
  return redis.call('SADD', seen, key) == 1
end
"""
#: KEYS seen, seen_count, queue, payload, seq, epoch; ARGV mode, channel, epoch, nonce,
#: then per request: seen key (fingerprint or Bloom offsets), dont_filter, priority,
#: JSON -> 1/0 each. Publishing what was added wakes the engines whose workers wait.
#: An id is the sequence number (FIFO within a priority) and the caller's random nonce,
#: so that an id is never reused, even when Redis rolled back the sequence (AOF).
ADD_LUA = (
    _fenced(6, 3)
    + MARK_SEEN_LUA
    + """
local out = {}
local added = 0
for i = 5, #ARGV, 4 do
  local new = mark_seen(ARGV[1], ARGV[i], KEYS[1], KEYS[2])
  if new or ARGV[i + 1] == '1' then
    local id = string.format('%015d-%s', redis.call('INCR', KEYS[5]), ARGV[4])
    redis.call('HSET', KEYS[4], id, ARGV[i + 3])
    redis.call('ZADD', KEYS[3], -tonumber(ARGV[i + 2]), id)
    out[#out + 1] = 1
    added = added + 1
  else
    out[#out + 1] = 0
  end
end
if added > 0 then redis.call('PUBLISH', ARGV[2], added) end
return out
"""
)
#: KEYS seen, seen_count; ARGV mode, then seen keys -> 1/0 each (was it new). Marks
#: redirect targets seen without queueing them.
CLAIM_LUA = (
    MARK_SEEN_LUA
    + """
local out = {}
for i = 2, #ARGV do
  out[#out + 1] = mark_seen(ARGV[1], ARGV[i], KEYS[1], KEYS[2]) and 1 or 0
end
return out
"""
)
#: KEYS queue, leases, owner, owned, payload, take token, epoch; ARGV owner, ttl ms, count,
#: epoch
#: -> id, JSON, id, JSON... (up to count), or when none is queued the number leased.
#: The token makes a retried take (its reply
#: was lost with the connection) get the requests it already leased, not orphan them.
TAKE_LUA = (
    NOW_LUA
    + _fenced(7, 4)
    + """
local ids = {}
local prior = redis.call('GET', KEYS[6])
if prior then
  for _, id in ipairs(cjson.decode(prior)) do
    if redis.call('HGET', KEYS[3], id) == ARGV[1] then ids[#ids + 1] = id end
  end
else
  local popped = redis.call('ZPOPMIN', KEYS[1], tonumber(ARGV[3]))
  for i = 1, #popped, 2 do ids[#ids + 1] = popped[i] end
  if #ids == 0 then return redis.call('ZCARD', KEYS[2]) end
  redis.call('SET', KEYS[6], cjson.encode(ids), 'PX', ARGV[2])
end
local out = {}
for _, id in ipairs(ids) do
  redis.call('ZADD', KEYS[2], now + tonumber(ARGV[2]), id)
  redis.call('HSET', KEYS[3], id, ARGV[1])
  redis.call('SADD', KEYS[4], id)
  out[#out + 1] = id
  out[#out + 1] = redis.call('HGET', KEYS[5], id) or ''
end
return out
"""
)
#: KEYS leases, owner, owned, payload, queue, epoch; ARGV owner, requeue (1/0), epoch, ids...
#: A request requeued by recovery but finished by its old owner after all is
#: taken out of the queue again, saving a duplicate fetch.
DONE_LUA = (
    REQUEUE_LUA
    + _fenced(6, 3)
    + """
for i = 4, #ARGV do
  local id = ARGV[i]
  if redis.call('HGET', KEYS[2], id) == ARGV[1] then
    redis.call('HDEL', KEYS[2], id)
    redis.call('ZREM', KEYS[1], id)
    redis.call('SREM', KEYS[3], id)
    if ARGV[2] == '1' then requeue(KEYS[5], KEYS[4], id) else redis.call('HDEL', KEYS[4], id) end
  elseif ARGV[2] == '0' and redis.call('ZREM', KEYS[5], id) == 1 then
    redis.call('HDEL', KEYS[4], id)
  end
end
return 1
"""
)
