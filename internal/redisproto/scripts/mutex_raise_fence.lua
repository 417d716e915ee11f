-- mutex_raise_fence: raise the fence counter of a lock to at least a given
-- fence, while a token holds the lock. Fenced Redlock (store/redlock) writes
-- the fence of a grant back with it to the nodes that issued a lower one, so
-- that every later grant on them is issued a higher fence.
--
-- KEYS[1]  lock key: holds the holder's token
-- KEYS[2]  fence key: the last fence issued for this lock name
-- KEYS[6]  the fence mark of the lock's hash slot (the last key; KEYS as
--          mutex_acquire's full form)
-- ARGV[1]  token
-- ARGV[2]  fence (a positive integer below 2^53)
-- ARGV[3]  fence retention in milliseconds (see mutex_acquire)
--
-- Reply: 1 when ARGV[1] holds the lock; the fence key and the mark are then
-- at least ARGV[2] (neither is ever lowered; the fence key is kept the
-- retention past the hold's remaining TTL). 0 when the token does not hold
-- the lock; nothing changed.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
raise(KEYS[2], KEYS[#KEYS], tonumber(ARGV[2]), redis.call('PTTL', KEYS[1]), tonumber(ARGV[3]))
return 1
