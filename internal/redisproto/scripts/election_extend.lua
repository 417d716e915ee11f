-- election_extend: renew the leadership of a token.
--
-- KEYS[1]  leadership (see election_acquire)
-- KEYS[2]  fence key (see clock_lib)
-- KEYS[3]  gate (see election_acquire)
-- KEYS[4]  the hold's record (see hold_lib)
-- KEYS[5]  main key (see name_lib)
-- KEYS[6]  the fence mark of the lock's hash slot (see clock_lib)
-- ARGV[1]  token
-- ARGV[2]  TTL in milliseconds
-- ARGV[7]  fence retention in milliseconds
--
-- Reply: 1 when ARGV[1] leads and its TTL is now ARGV[2], capped at its
-- record's max end; 0 when it does not, the max end passed, or a release
-- left it to its min end (nothing changed). The fence key is kept the fence retention past the
-- new TTL, as mutex_extend does.
if redis.call('HGET', KEYS[1], 't') ~= ARGV[1] then
  return 0
end
local function own(v) return v == 'dlock:election' end
if blocker(own) then
  return 0 -- another holder has the name: this leadership is not the lock's
end
local ttl = tonumber(ARGV[2])
local r = rec_parse(redis.call('GET', KEYS[4]))
if r and r.tok == ARGV[1] then
  ttl = rec_ttl(r, ttl)
  if r.released or ttl <= 0 then
    return 0
  end
  redis.call('PEXPIRE', KEYS[4], ttl)
end
redis.call('PEXPIRE', KEYS[1], ttl)
redis.call('PEXPIRE', KEYS[3], ttl)
mark('dlock:election', ttl, own)
keep_fence(ttl)
return 1
