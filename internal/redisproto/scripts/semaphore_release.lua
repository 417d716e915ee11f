-- semaphore_release: give a permit back. KEYS and ARGV: see semaphore_lib.
--
-- Reply: 1 when ARGV[1] held a permit (now free: the gate is deleted, which
-- wakes waiters); 0 when it held none (nothing changed).
prune()
if not redis.call('ZSCORE', R, ARGV[1]) then
  return 0
end
drop(ARGV[1])
redis.call('DEL', G)
sync()
if redis.call('EXISTS', R) == 0 then
  -- The last permit: the limit is kept for no one.
  redis.call('DEL', M, HS)
end
return 1
