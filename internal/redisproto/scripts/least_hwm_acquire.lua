-- least_hwm_acquire: a fenced acquire of another design than dlock's, kept
-- for measurement only: the fence comes from one high-water mark per server,
-- not from a counter per lock name, so a grant on a new name writes no key
-- but the lock's. No store runs it: the benchmarks measure what the design
-- would save (bench/'s raw-valkeygo-hwm, BenchmarkServerCPU's "hwm"), and
-- docs/benchmarks.md says what it would still need before a store could
-- use it (a holder's repeat, every pattern on the name, Redlock's
-- agreement, Redis Cluster's slots).
--
-- KEYS[1]  lock key
-- KEYS[2]  the server's fence mark: the last fence it issued, no expiry
-- ARGV[1]  token
-- ARGV[2]  TTL in milliseconds
--
-- Reply: the fence, or 0 when the lock is held.
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 0 end
local f = redis.call('INCR', KEYS[2])
if f < 1e15 then
  -- No mark yet (a new, or restarted empty, server): the clock floor.
  local t = redis.call('TIME')
  f = math.max(f, tonumber(t[1]) * 1000000 + math.floor(tonumber(t[2]) / 1000) * 1000)
  redis.call('SET', KEYS[2], string.format('%.0f', f))
end
return f
