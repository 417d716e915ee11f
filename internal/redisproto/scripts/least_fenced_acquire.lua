-- least_fenced_acquire: the least a fenced acquire on a new name can do with
-- dlock's guarantees (a fence above every earlier one for the name, across a
-- restart that kept nothing, from a counter that expires). No store runs it:
-- it is the floor the benchmarks measure dlock's mutex against (bench/'s
-- raw-valkeygo-fenced, BenchmarkServerCPU's "fenced").
--
-- KEYS[1]  lock key
-- KEYS[2]  fence counter
-- ARGV[1]  token
-- ARGV[2]  TTL in milliseconds
-- ARGV[3]  how long the counter is kept, in milliseconds
--
-- Reply: the fence, or 0 when the lock is held.
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 0 end
local t = redis.call('TIME')
local fs = t[1] .. string.rep('0', 6 - #t[2]) .. t[2]
local last = redis.call('SET', KEYS[2], fs, 'PX', ARGV[3], 'GET')
if last and #last >= #fs and (#last > #fs or last >= fs) then
  redis.call('SET', KEYS[2], string.format('%.0f', tonumber(last) + 1), 'PX', ARGV[3])
  return tonumber(last) + 1
end
return tonumber(fs)
