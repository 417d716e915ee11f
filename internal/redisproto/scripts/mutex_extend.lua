-- mutex_extend: compare-and-pexpire.
--
-- KEYS[1]  lock key
-- KEYS[2]  fence key (see mutex_acquire)
-- KEYS[3]  the fence mark of the lock's hash slot (unused; the keys of an
--          acquire that does not queue)
-- ARGV[1]  token
-- ARGV[2]  TTL in milliseconds
-- ARGV[3]  fence retention in milliseconds (see mutex_acquire)
--
-- Reply: 1 when ARGV[1] holds the lock and its TTL is now ARGV[2]; 0 when it
-- does not hold it (nothing changed).
--
-- The fence key is kept the retention past the new TTL, so that an acquire
-- repeated by the holder still finds the fence it holds.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
keep(KEYS[2], tonumber(ARGV[2]), tonumber(ARGV[3]))
return 1
