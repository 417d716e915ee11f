-- semaphore_extend: renew a permit's lease. KEYS and ARGV: see
-- semaphore_lib.
--
-- Reply: 1 when ARGV[1] holds a permit and its lease now ends ARGV[2] ms from
-- now; 0 when it does not (nothing changed).
local exp = redis.call('ZSCORE', R, ARGV[1])
if not exp or tonumber(exp) <= now() then
  return 0
end
local ttl = tonumber(ARGV[2])
redis.call('ZADD', R, now() + ttl, ARGV[1])
ensure(R, ttl + 60000)
ensure(M, ttl + 60000)
sync()
return 1
