-- semaphore_acquire: take one of ARGV[4] permits. KEYS and ARGV: see
-- semaphore_lib.
--
-- Reply: {1, fence, 0} when ARGV[1] holds a permit after the call (a repeat
-- refreshes its TTL and returns the same fence; each new permit gets a new
-- fence). {0, 0, retry_ms} when every permit is taken: retry_ms is the time
-- until the first one's lease runs out. {0, 0, retry_ms, 0, 0, held} while
-- another holder of the main key has the name (see name_lib), a repeat
-- included (nothing changed). {-2, 0, 0} for a limit below 1; {-3, limit,
-- 0} when the permits held have another limit.
local me, ttl, limit = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[4])
if not limit or limit < 1 then
  return {-2, 0, 0}
end
prune()
local held, left = blocker(own)
if held then
  return {0, 0, left, 0, 0, held}
end
local exp = redis.call('ZSCORE', R, me)
if exp then
  ttl = math.max(capped(me, ttl), 1)
  redis.call('ZADD', R, now() + ttl, me)
  ensure(R, ttl + 60000)
  ensure(M, ttl + 60000)
  keep_fence(ttl)
  sync()
  return {1, tonumber(redis.call('HGET', M, 'f:' .. me)), 0}
end
if redis.call('ZCARD', R) > 0 then
  local have = tonumber(redis.call('HGET', M, 'limit'))
  if have and have ~= limit then
    return {-3, have, 0}
  end
end
if redis.call('ZCARD', R) >= limit then
  -- NX: a refusal never rewrites the gate, so it wakes nobody.
  redis.call('SET', G, '1', 'PX', soonest(), 'NX')
  return {0, 0, soonest(), 0, 0, 5}
end
local f = fence(ttl)
redis.call('ZADD', R, now() + ttl, me)
redis.call('HSET', M, 'f:' .. me, string.format('%.0f', f), 'limit', limit)
ensure(R, ttl + 60000)
ensure(M, ttl + 60000)
if rec_wanted(9) then
  redis.call('HSET', HS, me, rec_new(me, f, rec_argv(9)))
  ensure(HS, ttl + 60000)
end
if redis.call('ZCARD', R) >= limit then
  redis.call('SET', G, '1', 'PX', soonest(), 'NX')
end
sync()
return {1, f, 0}
