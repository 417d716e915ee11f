-- reentrant_extend: renew the hold of the reentrant lock through one of its
-- acquisitions.
--
-- KEYS[1]  hold (see reentrant_acquire)
-- KEYS[2]  fence key (see clock_lib)
-- KEYS[3]  gate
-- KEYS[4]  the hold's record (see reentrant_acquire)
-- KEYS[5]  main key (see name_lib)
-- KEYS[6]  the fence mark of the lock's hash slot (see clock_lib)
-- ARGV[1]  token
-- ARGV[2]  TTL in milliseconds
--
-- Reply: 1 when ARGV[1] is a live acquisition; the hold then lives at least
-- ARGV[2] ms more (raised, never lowered, since other acquisitions share
-- it), capped at its record's max end. 0 when it is not, or the max end
-- passed (nothing changed).
if redis.call('HEXISTS', KEYS[1], 't:' .. ARGV[1]) == 0 then
  return 0
end
local function own(v) return v == 'dlock:reentrant' end
if blocker(own) then
  return 0 -- another holder has the name: this hold is not the lock's
end
local r = rec_parse(redis.call('GET', KEYS[4]))
if r and r.fence ~= tonumber(redis.call('HGET', KEYS[1], 'f')) then
  r = nil
end
local ttl = rec_ttl(r, tonumber(ARGV[2]))
if ttl <= 0 then
  return 0
end
if redis.call('PTTL', KEYS[1]) < ttl then
  redis.call('PEXPIRE', KEYS[1], ttl)
  redis.call('SET', KEYS[3], '1', 'PX', ttl)
  if r then
    redis.call('PEXPIRE', KEYS[4], ttl)
  end
  mark('dlock:reentrant', ttl, own)
  keep_fence(ttl)
end
return 1
