-- reentrant_release: release one acquisition of the reentrant lock; the
-- last one frees it.
--
-- KEYS[1]  hold (see reentrant_acquire)
-- KEYS[2]  fence key (kept: it expires the fence retention after the hold's TTL)
-- KEYS[3]  gate
-- KEYS[4]  the hold's record (see reentrant_acquire): deleted with the hold
-- KEYS[5]  main key (see name_lib): deleted with the hold
-- KEYS[6]  the fence mark of the lock's hash slot (unused)
-- ARGV[1]  token
--
-- Reply: 1 when ARGV[1] was a live acquisition (now released; when it was
-- the last, the hold and gate are deleted, which wakes waiters); 0 when it
-- was not (nothing changed), so a count never goes below zero.
if redis.call('HDEL', KEYS[1], 't:' .. ARGV[1]) == 0 then
  return 0
end
if redis.call('HLEN', KEYS[1]) <= 2 then
  redis.call('DEL', KEYS[1], KEYS[3], KEYS[4])
  mark('dlock:reentrant', 0, function(v) return v == 'dlock:reentrant' end)
end
return 1
