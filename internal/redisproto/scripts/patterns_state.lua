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
--
-- Reply: {mode, holders, pttl, queue, limit} of the first pattern in this
-- order that has a holder or a waiter; mode is the dlock.Mode number
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

if redis.call('EXISTS', KEYS[1]) == 1 then
  return {1, 1, redis.call('PTTL', KEYS[1]), 0, 0}
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
  return {mode, readers, longest(KEYS[2]), intents, 0}
end
local waiting = live(KEYS[6])
if redis.call('EXISTS', KEYS[5]) == 1 or waiting > 0 then
  return {4, redis.call('EXISTS', KEYS[5]), redis.call('PTTL', KEYS[5]), waiting, 0}
end
local permits = live(KEYS[7])
if permits > 0 then
  return {5, permits, longest(KEYS[7]), 0, tonumber(redis.call('HGET', KEYS[8], 'limit')) or 0}
end
if redis.call('EXISTS', KEYS[9]) == 1 then
  return {6, 1, redis.call('PTTL', KEYS[9]), 0, 0}
end
return {0, 0, 0, 0, 0}
