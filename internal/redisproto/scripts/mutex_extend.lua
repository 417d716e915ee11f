-- mutex_extend: compare-and-pexpire.
--
-- KEYS[1]  lock key
-- KEYS[2]  fence counter
-- ARGV[1]  token
-- ARGV[2]  TTL in milliseconds
-- ARGV[3]  counter keep in milliseconds: the fence retention, at least
--          TTL + 1 min (see mutex_acquire)
--
-- Reply: 1 when ARGV[1] holds the lock and its TTL is now ARGV[2]; 0 when it
-- does not hold it (nothing changed).
--
-- The fence counter is kept alive for at least a minute past the new TTL, so
-- that an acquire repeated by the holder still finds the fence it holds; a
-- refresh sets it to max(ARGV[3], TTL + 1 min).
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
local left = redis.call('PTTL', KEYS[2])
if left >= 0 and left < tonumber(ARGV[2]) + 60000 then
  redis.call('PEXPIRE', KEYS[2], string.format('%.0f', math.max(tonumber(ARGV[3]), tonumber(ARGV[2]) + 60000)))
end
return 1
