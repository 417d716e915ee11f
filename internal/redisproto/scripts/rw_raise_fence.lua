-- rw_raise_fence: raise the fence counter of a read-write lock to at least a
-- given fence, while a token holds its write side. Fenced Redlock
-- (store/redlock) writes the fence of a write grant back with it to the
-- nodes that issued a lower one, so that every later grant on them is issued
-- a higher fence.
--
-- KEYS     as for every read-write script (see rw_lib); used:
-- KEYS[1]  holders: sorted set, token -> lease expiry in server ms
-- KEYS[2]  fence counter: the last fence issued for this lock name
-- KEYS[3]  meta: hash, "w" -> the writer's token
-- ARGV[1]  token
-- ARGV[2]  fence (a positive integer below 2^53)
-- ARGV[3]  fence retention in milliseconds (see rw_lib)
--
-- Reply: 1 when ARGV[1] holds the write lease; the counter is then at least
-- ARGV[2] (it is never lowered; a raise keeps it for max(ARGV[3], the write
-- lease's remaining TTL + 1 min)). 0 when it
-- does not; nothing changed.
local R, F, M = KEYS[1], KEYS[2], KEYS[3]
if redis.call('HGET', M, 'w') ~= ARGV[1] then
  return 0
end
local exp = redis.call('ZSCORE', R, ARGV[1])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if not exp or tonumber(exp) <= now then
  return 0
end
if tonumber(ARGV[2]) > (tonumber(redis.call('GET', F)) or 0) then
  local keep = math.max(tonumber(ARGV[3]), tonumber(exp) - now + 60000)
  redis.call('SET', F, ARGV[2], 'PX', string.format('%.0f', keep))
end
return 1
