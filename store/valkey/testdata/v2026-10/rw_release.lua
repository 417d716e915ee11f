-- rw_release: give up a read or write lease, or withdraw a writer's intent.
-- KEYS and ARGV: see rw_lib.
--
-- Reply: 1 when ARGV[1] held the lock (now released) or waited as a writer
-- (intent withdrawn); 0 when it had neither (nothing changed). The gate is
-- written when waiters may now get in, which wakes them.
local me = ARGV[1]
prune()
if redis.call('ZSCORE', R, me) then
  local writer = redis.call('HGET', M, 'w') == me
  drop(me)
  if redis.call('ZCARD', R) == 0 then
    redis.call('DEL', G)
  elseif writer then
    redis.call('SET', G, '1', 'PX', math.max(longest(), 1))
  end
  sync()
  return 1
end
if redis.call('ZSCORE', Q, me) then
  unqueue(me)
  if redis.call('EXISTS', G) == 1 then
    redis.call('SET', G, '1', 'KEEPTTL')
  else
    redis.call('SET', G, '1', 'PX', 1)
  end
  return 1
end
return 0
