-- mutex_raise_fence: raise the fence counter of a lock to at least a given
-- fence, while a token holds the lock. Fenced Redlock (store/redlock) writes
-- the fence of a grant back with it to the nodes that issued a lower one, so
-- that every later grant on them is issued a higher fence.
--
-- KEYS[1]  lock key: holds the holder's token
-- KEYS[2]  fence counter: the last fence issued for this lock name
-- ARGV[1]  token
-- ARGV[2]  fence (a positive integer below 2^53)
-- ARGV[3]  fence retention in milliseconds (see mutex_acquire)
--
-- Reply: 1 when ARGV[1] holds the lock; the counter is then at least
-- ARGV[2] (it is never lowered; a raise keeps it for max(ARGV[3], the hold's
-- remaining TTL + 1 min)). 0 when the
-- token does not hold the lock; nothing changed.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
if tonumber(ARGV[2]) > (tonumber(redis.call('GET', KEYS[2])) or 0) then
  local keep = math.max(tonumber(ARGV[3]), redis.call('PTTL', KEYS[1]) + 60000)
  redis.call('SET', KEYS[2], ARGV[2], 'PX', string.format('%.0f', keep))
end
return 1
