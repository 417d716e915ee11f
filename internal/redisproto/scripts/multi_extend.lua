-- multi_extend: compare-and-pexpire the plain mutex keys of N names held by
-- one token (dlock.Multi), as mutex_extend does for each.
--
-- KEYS[3i-2]  lock key of name i (i = 1..N)
-- KEYS[3i-1]  fence key of name i
-- KEYS[3i]    the fence mark of name i's slot (unused; multi_acquire's keys)
-- ARGV[1]     token
-- ARGV[2]     fence retention in milliseconds (see mutex_acquire)
-- ARGV[2+i]   TTL in milliseconds of name i
--
-- Reply: {r_1, ..., r_N}: r_i is 1 when ARGV[1] holds name i and its TTL is
-- now ARGV[2+i]; 0 when it does not hold it (that name is left unchanged).
local reply = {}
for i = 1, #KEYS / 3 do
  reply[i] = 0
  if redis.call('GET', KEYS[3 * i - 2]) == ARGV[1] then
    local ttl = tonumber(ARGV[2 + i])
    redis.call('PEXPIRE', KEYS[3 * i - 2], ARGV[2 + i])
    keep(KEYS[3 * i - 1], ttl, tonumber(ARGV[2]))
    reply[i] = 1
  end
end
return reply
