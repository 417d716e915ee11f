-- mutex_release: compare-and-delete.
--
-- KEYS[1]  lock key
-- KEYS[2]  fence counter (kept: fences stay monotonic)
-- ARGV[1]  token
--
-- Reply: 1 when ARGV[1] held the lock and the key is deleted; 0 when it did
-- not hold it (nothing changed).
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
