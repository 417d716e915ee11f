-- patterns_state: describe the reentrant, read-write, fair, semaphore or election
-- state of one lock name for the Inspector, without revealing tokens. Only
-- reads: holders and queue entries past their deadline are not counted.
--
-- KEYS[1]  reentrant hold (hash)
-- KEYS[2]  read-write holders (sorted set, token -> expiry ms)
-- KEYS[3]  read-write meta (hash, "w" -> writer token)
-- KEYS[4]  read-write intent deadlines (sorted set, token -> expiry ms)
-- KEYS[5]  fair holder (string)
-- KEYS[6]  fair queue deadlines (sorted set, token -> expiry ms)
-- KEYS[7]  semaphore holders (sorted set, token -> expiry ms)
-- KEYS[8]  semaphore meta (hash, "limit")
-- KEYS[9]  election leadership (hash)
-- KEYS[10] an exclusive hold's record (string, see hold_lib)
-- KEYS[11] shared holds' records (hash, token -> record)
--
-- Reply: {mode, holders, pttl, queue, limit, owners...} of the first
-- pattern in this order that has a holder or a waiter, owners being four
-- values per live hold: holder, since, data, fence (see rec_owner; a
-- record that names no live hold is not shown); mode is the dlock.Mode number
-- (1 reentrant, 2 read, 3 write, 4 fair, 5 semaphore, 6 election), 0 when
-- none has.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local function live(key)
  return redis.call('ZCOUNT', key, '(' .. now, '+inf')
end

local function longest(key)
  local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
  if #last == 0 then
    return 0
  end
  return math.max(tonumber(last[2]) - now, 0)
end

-- exclusive returns the owner of an exclusive hold with fence f and token
-- tok (nil: the reentrant's, known by its fence). A leader's record is
-- known by its token alone, and shown with the fence the hold has now: a
-- RaiseFence (store/redlock's write-back) raises the hold's f above the
-- fence its record was issued with.
local function exclusive(f, tok)
  local r = rec_parse(redis.call('GET', KEYS[10]))
  if r and ((tok and r.tok ~= tok) or (not tok and r.fence ~= f)) then
    r = nil
  end
  local o = rec_owner(r, f)
  if f and f > 0 then
    o[4] = f
  end
  return o
end

-- shared returns the owners of the live members of sorted set key, with
-- their fences in hash meta.
local function shared(key, meta)
  local out = {}
  for _, tok in ipairs(redis.call('ZRANGEBYSCORE', key, '(' .. now, '+inf')) do
    local f = tonumber(redis.call('HGET', meta, 'f:' .. tok)) or 0
    local r = rec_parse(redis.call('HGET', KEYS[11], tok))
    if r and r.tok ~= tok then
      r = nil
    end
    for _, x in ipairs(rec_owner(r, f)) do
      out[#out + 1] = x
    end
  end
  return out
end

local function with(reply, owners)
  for _, x in ipairs(owners) do
    reply[#reply + 1] = x
  end
  return reply
end

if redis.call('EXISTS', KEYS[1]) == 1 then
  local f = tonumber(redis.call('HGET', KEYS[1], 'f')) or 0
  return with({1, 1, redis.call('PTTL', KEYS[1]), 0, 0}, exclusive(f))
end
local readers, intents = live(KEYS[2]), live(KEYS[4])
if readers > 0 or intents > 0 then
  local mode = 2
  local w = redis.call('HGET', KEYS[3], 'w')
  if w then
    local exp = redis.call('ZSCORE', KEYS[2], w)
    if exp and tonumber(exp) > now then
      mode = 3
    end
  end
  return with({mode, readers, longest(KEYS[2]), intents, 0}, shared(KEYS[2], KEYS[3]))
end
local waiting = live(KEYS[6])
local fair = redis.call('GET', KEYS[5])
if fair or waiting > 0 then
  local reply = {4, fair and 1 or 0, redis.call('PTTL', KEYS[5]), waiting, 0}
  if fair then
    local f, tok = string.match(fair, '^(%d+)|(.*)$')
    with(reply, exclusive(tonumber(f), tok))
  end
  return reply
end
local permits = live(KEYS[7])
if permits > 0 then
  return with({5, permits, longest(KEYS[7]), 0, tonumber(redis.call('HGET', KEYS[8], 'limit')) or 0}, shared(KEYS[7], KEYS[8]))
end
if redis.call('EXISTS', KEYS[9]) == 1 then
  local e = redis.call('HMGET', KEYS[9], 't', 'f')
  local f = tonumber(e[2]) or 0
  return with({6, 1, redis.call('PTTL', KEYS[9]), 0, 0}, exclusive(f, e[1]))
end
return {0, 0, 0, 0, 0}
