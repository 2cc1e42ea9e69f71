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


#: A scalable Bloom filter in one bitmap: stage i holds C * 2^i URLs at false-positive
#: rate P / 2^i (mode ``bloom:C:P``), its bits after those of the stages before it, so the
#: bitmap grows with the crawl and the whole filter stays under 2 P. A stage is full when
#: the count of URLs added reaches the capacities so far (each was added to the last
#: stage); a URL is seen if any stage holds all its bits. The bits of a URL in a stage
#: come from its two hashes (``bloom_hashes``); fmod is exact on these whole numbers.
#: When the next stage would pass Redis's largest string (2^32 bits), the last one fills.
BLOOM_LUA = """
local LN2 = math.log(2)
local function bloom_stage(cap0, p0, i)
  local cap, p = cap0 * 2 ^ i, p0 / 2 ^ i
  return cap, math.ceil(cap * -math.log(p) / LN2 ^ 2), math.ceil(-math.log(p) / LN2)
end
local function bloom_mark(spec, hashes, seen, seen_count)
  local cap0, p0 = string.match(spec, '^bloom:(%d+):(.+)$')
  cap0, p0 = tonumber(cap0), tonumber(p0)
  local h1, h2 = string.match(hashes, '^(%d+) (%d+)$')
  h1, h2 = tonumber(h1), tonumber(h2)
  local count = tonumber(redis.call('GET', seen_count) or '0')
  local base, filled, i = 0, 0, 0
  while true do
    local cap, bits, k = bloom_stage(cap0, p0, i)
    local _, next_bits = bloom_stage(cap0, p0, i + 1)
    local last = count < filled + cap or base + bits + next_bits > 4294967296
    local new = false
    for j = 0, k - 1 do
      local offset = base + math.fmod(h1 + j * h2, bits)
      if last then
        if redis.call('SETBIT', seen, offset, 1) == 0 then new = true end
      elseif redis.call('GETBIT', seen, offset) == 0 then
        new = true
        break
      end
    end
    if not new then return false end
    if last then
      redis.call('INCR', seen_count)
      return true
    end
    base, filled, i = base + bits, filled + cap, i + 1
  end
end
"""
#: marks one seen key (a fingerprint, or a Bloom filter's hashes) in the seen set: true
#: if it was new
MARK_SEEN_LUA = (
    BLOOM_LUA
    + """
local function mark_seen(mode, key, seen, seen_count)
  if mode ~= 'exact' then return bloom_mark(mode, key, seen, seen_count) end
  return redis.call('SADD', seen, key) == 1
end
"""
)
#: KEYS seen, seen_count, queue, payload, seq, epoch; ARGV mode, channel, epoch, nonce,
#: then per request: seen key (fingerprint or Bloom hashes), dont_filter, priority,
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


#: the plain add, publishing the queue it added to: its bucket's owner is woken for it
OWNED_ADD_LUA = ADD_LUA.replace(
    "redis.call('PUBLISH', ARGV[2], added)", "redis.call('PUBLISH', ARGV[2], KEYS[3])"
)
#: the plain take, refused unless the caller holds the bucket's lease (KEYS[8], ARGV[5])
OWNED_TAKE_LUA = (
    "if redis.call('HGET', KEYS[8], 'token') ~= ARGV[5] then\n"
    "  return redis.error_reply('STALE bucket lease')\nend\n" + TAKE_LUA
)


#: the crawl's counts over every bucket, on one server (a Cluster reads them in one
#: pipeline instead): ARGV prefix, spider, buckets, epoch, bloom (1/0) -> queued, leased,
#: seen, or LOST and the epoch a bucket holds. One call and three numbers back, where
#: the pipeline sends 1,024 commands and parses as many answers (idle workers ask often)
COUNTS_LUA = """
local queued, leased, seen = 0, 0, 0
for b = 0, tonumber(ARGV[3]) - 1 do
  local tag = ARGV[1] .. ':{' .. ARGV[2] .. '#b' .. b .. '}:'
  local epoch = redis.call('GET', tag .. 'epoch')
  if epoch ~= ARGV[4] then return {'LOST', tostring(epoch)} end
  queued = queued + redis.call('ZCARD', tag .. 'queue')
  leased = leased + redis.call('ZCARD', tag .. 'leases')
  if ARGV[5] == '1' then
    seen = seen + tonumber(redis.call('GET', tag .. 'seen_n') or '0')
  else
    seen = seen + redis.call('SCARD', tag .. 'seen')
  end
end
return {queued, leased, seen}
"""
