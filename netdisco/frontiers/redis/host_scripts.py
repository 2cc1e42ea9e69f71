"""The Lua scripts of the host queues: each take and release is one atomic script.

Layout (Mercator's back queues, in Redis; ``HostKeys`` names the keys): one sorted
set of request ids per host (``hq:<host>``, by ``-priority`` then id, so FIFO
within a priority); ``ready``, the hosts that have queued requests and a free
slot, scored by when each may next start one (microseconds, the Redis server's
clock); ``next``, that time per host even while it has nothing queued;
``busy:<host>``, the ids holding the host's slots; ``hostof``, id -> host;
``pace:<host>``, a host's own delay and slots where they are not the crawl's.

A take picks the ready host whose time came first, pops its best request and
holds one of its slots until its download is over (``free``; the lease stays until
the request is done, so nothing is lost), or until it is done, put back or its lease
goes back. With ``download_delay`` > 0 a host has one slot and the next start waits
for the previous request to end, plus the delay: a start can only follow a
response the server already sent, so two starts at the server are never closer
than the delay, whatever the latency between Redis, the engines and the site.
The end is when the engine had the whole response: an acknowledgement says how
long ago that was (its *credit*, measured by the engine as a duration), so the
time spent parsing and sending the ack is not added to the delay.

Every script shares the first KEYS and ARGV (``HOST_PRELUDE``): KEYS ready,
next, hostof, hosted, inbox, payload, leases, owner, owned, trace, epoch, take
token; ARGV key prefix, delay (us), slots per host, trace (1/0), channel, epoch.
The KEYS, and the host keys the scripts build from the prefix, share one hash tag
(a shard's), so each script touches one slot of a Redis Cluster. Wake-ups publish
the prefix: engines then ask that shard first. A host that becomes ready wakes the
takers if it is due now or first (one due after another does not: they wait for that
one already, and a wake-up costs every engine a round trip), and so does the last lease of a shard
ending with nothing queued: the takers that wait while leases remain then see at once
that the crawl is over.
"""

from __future__ import annotations

from dataclasses import dataclass

from netdisco.frontiers.redis.leases import PRIORITY_LUA, Keys
from netdisco.frontiers.redis.scripts import MARK_SEEN_LUA, _fenced

#: how long an add's answer is kept for its retries (ms)
ADD_TOKEN_MS = 60_000
#: the credit of a free whose request sent nothing: its host's turn is given back
UNSENT = "-1"


@dataclass(frozen=True)
class HostKeys(Keys):
    """The keys of the host queues (``host_scripts`` describes each), one hash tag."""

    @property
    def host_prefix(self) -> str:
        """Prefix of ``hq:<host>`` (queued ids) and ``busy:<host>`` (ids holding slots)."""
        return self._key("")

    def host_queue(self, host: str) -> str:
        """Sorted set: a host's queued request ids by ``-priority``, then id."""
        return self._key(f"hq:{host}")

    def busy(self, host: str) -> str:
        """Set: the ids that hold a host's slots now."""
        return self._key(f"busy:{host}")

    def pace(self, host: str) -> str:
        """Hash: a host's own ``d`` delay (us) and ``c`` slots, if they are not the
        crawl's (a ``hosts`` row, its Crawl-delay, autothrottle); expires unless renewed."""
        return self._key(f"pace:{host}")

    @property
    def ready(self) -> str:
        """Sorted set: hosts with queued requests and a free slot, by next start (us)."""
        return self._key("ready")

    @property
    def next_start(self) -> str:
        """Hash: host -> the earliest time (us, Redis clock) it may start a request."""
        return self._key("next")

    @property
    def hostof(self) -> str:
        """Hash: request id -> its host, while queued or leased."""
        return self._key("hostof")

    @property
    def hosted(self) -> str:
        """Counter: requests in host queues (the inbox is counted by ``ZCARD``)."""
        return self._key("hosted")

    def robots(self, origin: str) -> str:
        """String: an origin's robots.txt as the crawl reads it (expires)."""
        return self._key(f"robots:{origin}")

    def add_token(self, nonce: str) -> str:
        """String: what one add answered, so that its retry changes nothing (expires)."""
        return self._key(f"add:{nonce}")

    @property
    def trace(self) -> str:
        """List: ``start|end <us> <host> <id>`` per slot taken and released, if traced
        (an end's time is when the host's delay runs from)."""
        return self._key("trace")


#: the crawl's epoch first (KEYS[11], ARGV[6]), as every script of the frontier
HOST_PRELUDE = (
    _fenced(11, 6)
    + PRIORITY_LUA
    + """
local pre, delay, cap = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local tracing, channel = ARGV[4] == '1', ARGV[5]
local K_token = KEYS[12]
local K_ready, K_next, K_hostof, K_hosted = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local K_inbox, K_payload, K_leases, K_owner = KEYS[5], KEYS[6], KEYS[7], KEYS[8]
local K_owned, K_trace = KEYS[9], KEYS[10]
local tm = redis.call('TIME')
local now = tonumber(tm[1]) * 1000000 + tonumber(tm[2])
-- whole numbers as digits: Lua would send 1.7960505109744e+15, 100 us off
local function int(x) return string.format('%.0f', x) end
local function trace(what, host, id, at)
  if tracing then
    redis.call('RPUSH', K_trace, what .. ' ' .. int(at) .. ' ' .. host .. ' ' .. id)
  end
end
-- a host's own delay (us) and slots (HostKeys.pace: a hosts row, its Crawl-delay,
-- autothrottle), else the crawl's
local function pace(host)
  local own = redis.call('HMGET', pre .. 'pace:' .. host, 'd', 'c')
  return tonumber(own[1]) or delay, tonumber(own[2]) or cap
end
-- in the ready set while it has queued requests and a free slot. A host that becomes
-- ready wakes the takers if it is due now or due first; one due after another does
-- not: they already wait for that one, and ask again when it is due (a wake-up costs
-- every engine a round trip)
local function refresh(host)
  local queued = redis.call('EXISTS', pre .. 'hq:' .. host) == 1
  local _, slots = pace(host)
  if queued and redis.call('SCARD', pre .. 'busy:' .. host) < slots then
    local at = redis.call('HGET', K_next, host) or '0'
    if redis.call('ZADD', K_ready, at, host) == 1 and (tonumber(at) <= now
      or redis.call('ZRANGE', K_ready, 0, 0)[1] == host) then
      redis.call('PUBLISH', channel, pre)
    end
  else
    redis.call('ZREM', K_ready, host)
  end
end
local function enqueue(host, id, score)
  redis.call('ZADD', pre .. 'hq:' .. host, score, id)
  redis.call('HSET', K_hostof, id, host)
  redis.call('INCR', K_hosted)
end
-- a slot ends: the host may start again no sooner than now + its delay - credit (the
-- response ended credit us ago), or now + wait if longer (logged as the end, the time
-- the delay runs from: that time - the delay)
local function release(host, id, credit, wait)
  if redis.call('SREM', pre .. 'busy:' .. host, id) == 1 then
    local own = pace(host)
    local at = now + math.max(own - credit, wait)
    if at > tonumber(redis.call('HGET', K_next, host) or '0') then
      redis.call('HSET', K_next, host, int(at))
    end
    trace('end', host, id, at - own)
  end
  refresh(host)
end
-- the download is over (the lease stays until the ack): the slot is free from now, and
-- the delay runs from the response's end, credit us ago. A negative credit: nothing was
-- sent (robots.txt forbade it), so the turn its take booked is given back: with a delay
-- the host has one slot, and the take came when the host was due, so it is due now
local function free(owner, id, credit)
  if redis.call('HGET', K_owner, id) == owner then
    local host = redis.call('HGET', K_hostof, id) or ''
    if credit < 0 then
      if redis.call('SISMEMBER', pre .. 'busy:' .. host, id) == 1
        and tonumber(redis.call('HGET', K_next, host) or '0') > now then
        redis.call('HSET', K_next, host, int(now))
      end
      credit = math.huge
    end
    release(host, id, credit, 0)
  end
end
-- nothing queued, put back or leased in the shard: wake the takers, who wait for a
-- wake-up while leases remain (no add comes at the end), so that the crawl ends now
local function settle()
  if redis.call('ZCARD', K_leases) + redis.call('ZCARD', K_inbox) == 0
    and tonumber(redis.call('GET', K_hosted) or '0') == 0 then
    redis.call('PUBLISH', channel, pre)
  end
end
local function forget(id)
  redis.call('HDEL', K_payload, id)
  redis.call('HDEL', K_hostof, id)
end
-- leases the lease scripts put back (into the inbox) return to their host queues
local function drain_inbox(limit)
  local back = redis.call('ZPOPMIN', K_inbox, limit)
  for i = 1, #back, 2 do
    local host = redis.call('HGET', K_hostof, back[i]) or ''
    enqueue(host, back[i], tonumber(back[i + 1]))
    release(host, back[i], 0, 0)
  end
end
-- end our lease on id: done (forget it) or put back (its body replaced if given);
-- the response ended credit us ago, so the delay has run that long already
local function finish(owner, id, requeue, wait, body, credit)
  local host = redis.call('HGET', K_hostof, id) or ''
  if redis.call('HGET', K_owner, id) == owner then
    redis.call('HDEL', K_owner, id)
    redis.call('ZREM', K_leases, id)
    redis.call('SREM', K_owned, id)
    if requeue and body ~= '' then redis.call('HSET', K_payload, id, body) end
    local raw = redis.call('HGET', K_payload, id)
    if requeue and raw then enqueue(host, id, -priority(raw)) else forget(id) end
    release(host, id, credit, wait)
  elseif not requeue then
    -- put back by lease recovery meanwhile, but done after all: take it out again
    if redis.call('ZREM', K_inbox, id) == 1 then
      forget(id)
      release(host, id, 0, 0)
    elseif redis.call('ZREM', pre .. 'hq:' .. host, id) == 1 then
      redis.call('DECR', K_hosted)
      forget(id)
      refresh(host)
    end
  end
end
"""
)

#: ARGV (after the prelude) mode, nonce (makes this call's ids unique, as ``ADD_LUA``),
#: then per request: seen key, dont_filter, priority, host, JSON -> 1/0 each. The take
#: token key is the add's (``add_token``): a retry of an add that ran answers as it did
#: and queues nothing twice (a ``dont_filter`` request would be), and its write lets a
#: ``WAIT`` after it confirm the first run.
HOST_ADD_LUA = (
    HOST_PRELUDE
    + MARK_SEEN_LUA
    + """
local K_seen, K_seen_n, K_seq = KEYS[13], KEYS[14], KEYS[15]
local prior = redis.call('GET', K_token)
if prior then
  redis.call('PEXPIRE', K_token, ADD_TOKEN_MS)
  return cjson.decode(prior)
end
local out = {}
for i = 9, #ARGV, 5 do
  out[#out + 1] = 0
  if mark_seen(ARGV[7], ARGV[i], K_seen, K_seen_n) or ARGV[i + 1] == '1' then
    local id = string.format('%015d-%s', redis.call('INCR', K_seq), ARGV[8])
    redis.call('HSET', K_payload, id, ARGV[i + 4])
    enqueue(ARGV[i + 3], id, -tonumber(ARGV[i + 2]))
    refresh(ARGV[i + 3])
    out[#out] = 1
  end
end
redis.call('SET', K_token, cjson.encode(out), 'PX', ADD_TOKEN_MS)
return out
""".replace("ADD_TOKEN_MS", str(ADD_TOKEN_MS))
)

#: ARGV (after the prelude) owner, lease ttl ms, count, n, then id, credit (us) of n
#: requests whose slots to free, then id, credit of each request to acknowledge
#: -> id, JSON, id, JSON... or, when no host is due, how long (us) until one is (1000 s
#: when only busy hosts or leases remain: a release wakes the takers), 0 when nothing
#: is queued or leased at all.
HOST_TAKE_LUA = (
    HOST_PRELUDE
    + """
local owner, ttl, count = ARGV[7], tonumber(ARGV[8]), tonumber(ARGV[9])
local acks = 11 + 2 * tonumber(ARGV[10])
for i = 11, acks - 1, 2 do free(owner, ARGV[i], tonumber(ARGV[i + 1])) end
for i = acks, #ARGV, 2 do finish(owner, ARGV[i], false, 0, '', tonumber(ARGV[i + 1])) end
if acks <= #ARGV then settle() end
drain_inbox(100)
local ids = {}
local prior = redis.call('GET', K_token)
if prior then
  for _, id in ipairs(cjson.decode(prior)) do
    if redis.call('HGET', K_owner, id) == owner then ids[#ids + 1] = id end
  end
  if #ids == 0 then return 1 end
else
  while #ids < count do
    local due = redis.call('ZRANGEBYSCORE', K_ready, '-inf', now, 'LIMIT', 0, 1)
    if #due == 0 then break end
    local host = due[1]
    local top = redis.call('ZPOPMIN', pre .. 'hq:' .. host)
    if #top > 0 then
      redis.call('DECR', K_hosted)
      redis.call('SADD', pre .. 'busy:' .. host, top[1])
      local own = pace(host)
      if now + own > tonumber(redis.call('HGET', K_next, host) or '0') then
        redis.call('HSET', K_next, host, int(now + own))
      end
      trace('start', host, top[1], now)
      ids[#ids + 1] = top[1]
    end
    refresh(host)
  end
  if #ids == 0 then
    local first = redis.call('ZRANGE', K_ready, 0, 0, 'WITHSCORES')
    if #first > 0 then return math.max(1, tonumber(first[2]) - now) end
    local waiting = tonumber(redis.call('GET', K_hosted) or '0') + redis.call('ZCARD', K_leases)
    return waiting > 0 and 1000000000 or 0
  end
  redis.call('SET', K_token, cjson.encode(ids), 'PX', ttl)
end
local out = {}
local deadline = int(math.floor(now / 1000) + ttl)
for _, id in ipairs(ids) do
  redis.call('ZADD', K_leases, deadline, id)
  redis.call('HSET', K_owner, id, owner)
  redis.call('SADD', K_owned, id)
  out[#out + 1] = id
  out[#out + 1] = redis.call('HGET', K_payload, id) or ''
end
return out
"""
)

#: ARGV (after the prelude) owner, what (1: put back, 0: done, 2: only free the slot),
#: back-off (us), then per id: id, body (the request to store when put back, '' to keep
#: the stored one), credit (us) -> 1
HOST_DONE_LUA = (
    HOST_PRELUDE
    + """
for i = 10, #ARGV, 3 do
  if ARGV[8] == '2' then
    free(ARGV[7], ARGV[i], tonumber(ARGV[i + 2]))
  else
    finish(ARGV[7], ARGV[i], ARGV[8] == '1', tonumber(ARGV[9]), ARGV[i + 1], tonumber(ARGV[i + 2]))
  end
end
if ARGV[8] == '0' then settle() end
return 1
"""
)
