-- semaphore_extend: renew a permit's lease. KEYS and ARGV: see
-- semaphore_lib.
--
-- Reply: 1 when ARGV[1] holds a permit and its lease now ends ARGV[2] ms from
-- now; 0 when it does not, or another holder of the main key has the name
-- (see name_lib): nothing changed.
local exp = redis.call('ZSCORE', R, ARGV[1])
if not exp or tonumber(exp) <= now() then
  return 0
end
if blocker(own) then
  return 0 -- another holder has the name: this permit is not the lock's
end
local ttl = capped(ARGV[1], tonumber(ARGV[2]))
if ttl <= 0 then
  return 0 -- past its record's max end
end
redis.call('ZADD', R, now() + ttl, ARGV[1])
ensure(R, ttl + 60000)
ensure(M, ttl + 60000)
keep_fence(ttl)
sync()
return 1
