-- rw_raise_fence: raise the fence counter of a read-write lock to at least a
-- given fence, while a token holds its write side. Fenced Redlock
-- (store/redlock) writes the fence of a write grant back with it to the
-- nodes that issued a lower one, so that every later grant on them is issued
-- a higher fence.
--
-- KEYS     as for every read-write script (see rw_lib); used:
-- KEYS[1]  holders: sorted set, token -> lease expiry in server ms
-- KEYS[2]  fence key: the last fence issued for this lock name
-- KEYS[3]  meta: hash, "w" -> the writer's token
-- KEYS[#KEYS] the fence mark of the lock's hash slot (see clock_lib)
-- ARGV[1]  token
-- ARGV[2]  fence (a positive integer below 2^53)
-- ARGV[3]  fence retention in milliseconds (see rw_lib)
--
-- Reply: 1 when ARGV[1] holds the write lease; the fence key and the mark
-- are then at least ARGV[2] (never lowered; the fence key is kept ARGV[3]
-- past the write lease's remaining TTL). 0 when it
-- does not; nothing changed.
local R, F, M = KEYS[1], KEYS[2], KEYS[3]
if redis.call('HGET', M, 'w') ~= ARGV[1] then
  return 0
end
local exp = redis.call('ZSCORE', R, ARGV[1])
local t = now()
if not exp or tonumber(exp) <= t then
  return 0
end
raise(F, KEYS[#KEYS], tonumber(ARGV[2]), tonumber(exp) - t, tonumber(ARGV[3]))
return 1
