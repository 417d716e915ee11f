-- multi_extend: compare-and-pexpire the plain mutex keys of N names held by
-- one token (dlock.Multi), as mutex_extend does for each.
--
-- KEYS[2i-1]  lock key of name i (i = 1..N)
-- KEYS[2i]    fence counter of name i
-- ARGV[1]     token
-- ARGV[2]     fence retention in milliseconds (see mutex_acquire)
-- ARGV[2+i]   TTL in milliseconds of name i
--
-- Reply: {r_1, ..., r_N}: r_i is 1 when ARGV[1] holds name i and its TTL is
-- now ARGV[2+i]; 0 when it does not hold it (that name is left unchanged).
local reply = {}
for i = 1, #KEYS / 2 do
  reply[i] = 0
  if redis.call('GET', KEYS[2 * i - 1]) == ARGV[1] then
    local ttl = tonumber(ARGV[2 + i])
    redis.call('PEXPIRE', KEYS[2 * i - 1], ARGV[2 + i])
    local left = redis.call('PTTL', KEYS[2 * i])
    if left >= 0 and left < ttl + 60000 then
      redis.call('PEXPIRE', KEYS[2 * i], string.format('%.0f', math.max(tonumber(ARGV[2]), ttl + 60000)))
    end
    reply[i] = 1
  end
end
return reply
