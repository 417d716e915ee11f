-- semaphore_resume: take back a permit by its token (store.Resumer). KEYS
-- and ARGV: see semaphore_lib.
--
-- Reply: {fence, ttl, max hold left} when ARGV[1] holds a permit (its lease
-- now ends ttl ms from now, ARGV[2] capped at its record's max end); 0 when
-- it does not, another holder has the name, or the max end passed (nothing
-- changed).
local me = ARGV[1]
local exp = redis.call('ZSCORE', R, me)
if not exp or tonumber(exp) <= now() then
  return 0
end
if blocker(own) then
  return 0
end
local ttl, left = capped(me, tonumber(ARGV[2]))
if ttl <= 0 then
  return 0
end
redis.call('ZADD', R, now() + ttl, me)
ensure(R, ttl + 60000)
ensure(M, ttl + 60000)
keep_fence(ttl)
sync()
return {tonumber(redis.call('HGET', M, 'f:' .. me)), ttl, left}
