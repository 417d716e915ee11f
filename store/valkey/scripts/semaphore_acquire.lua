-- semaphore_acquire: take one of ARGV[4] permits. KEYS and ARGV: see
-- semaphore_lib.
--
-- Reply: {1, fence, 0} when ARGV[1] holds a permit after the call (a repeat
-- refreshes its TTL and returns the same fence; each new permit gets a new
-- fence). {0, 0, retry_ms} when every permit is taken: retry_ms is the time
-- until the first one's lease runs out. {-2, 0, 0} for a limit below 1.
local me, ttl, limit = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[4])
if not limit or limit < 1 then
  return {-2, 0, 0}
end
prune()
local exp = redis.call('ZSCORE', R, me)
if exp then
  redis.call('ZADD', R, now() + ttl, me)
  ensure(R, ttl + 60000)
  ensure(M, ttl + 60000)
  return {1, tonumber(redis.call('HGET', M, 'f:' .. me)), 0}
end
if redis.call('ZCARD', R) >= limit then
  -- NX: a refusal never rewrites the gate, so it wakes nobody.
  redis.call('SET', G, '1', 'PX', soonest(), 'NX')
  return {0, 0, soonest()}
end
local f = fence(ttl)
redis.call('ZADD', R, now() + ttl, me)
redis.call('HSET', M, 'f:' .. me, string.format('%.0f', f), 'limit', limit)
ensure(R, ttl + 60000)
ensure(M, ttl + 60000)
if redis.call('ZCARD', R) >= limit then
  redis.call('SET', G, '1', 'PX', soonest(), 'NX')
end
return {1, f, 0}
