-- least_fenced_acquire: the least a fenced acquire on a new name can do with
-- dlock's guarantees: a fence above every earlier one for the name, on a
-- node that keeps its data whatever its clock does, and across a restart, a
-- restore or a failover by the clock floor on every grant (docs/safety.md,
-- Claims 1, 2 and 4), from a counter that expires. No store runs it: it is
-- the floor the benchmarks measure dlock's mutex against (bench/'s
-- raw-valkeygo-fenced, BenchmarkServerCPU's "fenced").
--
-- KEYS[1]  lock key
-- KEYS[2]  fence counter: the name's last fence, kept ARGV[3] ms
-- KEYS[3]  fence mark: a string, at least every fence issued on the node
--          (one key, no expiry; one per hash slot on a cluster)
-- ARGV[1]  token
-- ARGV[2]  TTL in milliseconds
-- ARGV[3]  how long the counter is kept, in milliseconds
--
-- Reply: the fence, or 0 when the lock is held.
--
-- The fence is max(last + 1, server time in µs), last the counter, or the
-- mark when the counter has expired: without the mark, a counter gone and
-- a clock stepped back by more than ARGV[3] repeat a fence (until 2026-12
-- this script read TIME alone then). The mark is raised by SET GET,
-- written back in the rare case it stood above the fence: one call where
-- ZADD GT on a sorted set costs more (BenchmarkServerCPU).
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 0 end
local t = redis.call('TIME')
local fs = t[1] .. string.rep('0', 6 - #t[2]) .. t[2]
local f = tonumber(fs)
local last = redis.call('SET', KEYS[2], fs, 'PX', ARGV[3], 'GET')
if not last then
  last = redis.call('GET', KEYS[3])
end
if last and tonumber(last) >= f then
  f = tonumber(last) + 1
  fs = string.format('%.0f', f)
  redis.call('SET', KEYS[2], fs, 'PX', ARGV[3])
end
local m = redis.call('SET', KEYS[3], fs, 'GET')
if m and tonumber(m) > f then
  redis.call('SET', KEYS[3], m)
end
return f
