-- multi_extend: compare-and-pexpire the plain mutex keys of N names held by
-- one token (dlock.Multi), as mutex_extend does for each.
--
-- KEYS      as multi_acquire's
-- ARGV[1]   token
-- ARGV[2]   fence retention in milliseconds (see mutex_acquire)
-- ARGV[2+i] TTL in milliseconds of name i
--
-- Reply: {r_1, ..., r_N}: r_i is 1 when ARGV[1] holds name i and its TTL is
-- now ARGV[2+i], capped at its record's max end; 0 when it does not hold
-- it, the max end passed, or a release left it to its min end (that name
-- is left unchanged).
hold_lib()
local reply = {}
for i = 1, #KEYS / 6 do
  reply[i] = 0
  local v = redis.call('MGET', KEYS[6 * i - 5], KEYS[6 * i - 1])
  if v[1] == ARGV[1] then
    local ttl = tonumber(ARGV[2 + i])
    local r = rec_parse(v[2])
    if r and r.tok == ARGV[1] then
      ttl = rec_ttl(r, ttl)
      if r.released then
        ttl = 0
      end
      if ttl > 0 then
        redis.call('PEXPIRE', KEYS[6 * i - 1], ttl)
        keep(KEYS[6 * i - 2], ttl, 0)
      end
    end
    if ttl > 0 then
      redis.call('PEXPIRE', KEYS[6 * i - 5], ttl)
      keep(KEYS[6 * i - 4], ttl, tonumber(ARGV[2]))
      reply[i] = 1
    end
  end
end
return reply
