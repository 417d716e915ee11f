-- rw_write_acquire: take the write side of the read-write lock. KEYS and
-- ARGV: see rw_lib.
--
-- Reply: {1, fence, 0} when ARGV[1] holds the write lease after the call (a
-- repeat refreshes its TTL and returns the same fence; a new grant issues a
-- new fence). {0, 0, retry_ms, 0, position} while anyone holds the lock or an
-- earlier writer waits; with ARGV[5] = "1" the caller keeps (or takes) its
-- place, which keeps new readers out until it has had its turn.
-- {-1, 0, 0} when ARGV[3] is the token of a reader holding the lock: an
-- upgrade, which would wait for itself.
local me, ttl, owner = ARGV[1], tonumber(ARGV[2]), ARGV[3]
prune()
local f = refresh(me, ttl)
if f then
  return {1, f, 0}
end
if owner ~= me and redis.call('ZSCORE', R, owner) and redis.call('HGET', M, 'w') ~= owner then
  return {-1, 0, 0}
end
local head = redis.call('ZRANGE', Q, 0, 0)[1]
if redis.call('ZCARD', R) > 0 or (head and head ~= me) then
  local pos
  if ARGV[5] == '1' then
    local qttl = tonumber(ARGV[6])
    if not redis.call('ZSCORE', Q, me) then
      redis.call('ZADD', Q, redis.call('HINCRBY', M, 'seq', 1), me)
    end
    redis.call('ZADD', QX, now() + qttl, me)
    ensure(Q, qttl + 60000)
    ensure(QX, qttl + 60000)
    ensure(M, qttl + 60000)
    pos = redis.call('ZRANK', Q, me)
  else
    pos = redis.call('ZRANK', Q, me) or redis.call('ZCARD', Q)
  end
  return {0, 0, longest(), 0, pos}
end
unqueue(me)
f = fence(ttl)
redis.call('HSET', M, 'w', me)
hold(me, ttl, f)
return {1, f, 0}
