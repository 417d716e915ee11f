-- mutex_extend: compare-and-pexpire.
--
-- KEYS[1]  lock key
-- KEYS[2]  fence key (see mutex_acquire)
-- KEYS[3]  the hold's record (see hold_lib)
-- KEYS[4]  waiters flag (see mutex_acquire): kept alive with a record
-- KEYS[5]  the fence mark of the lock's hash slot (unused)
-- ARGV[1]  token
-- ARGV[2]  TTL in milliseconds
-- ARGV[3]  fence retention in milliseconds (see mutex_acquire)
--
-- Reply: 1 when ARGV[1] holds the lock and its TTL is now ARGV[2], capped
-- at its record's max end; 0 when it does not hold it, its record's max
-- end passed, or a release left it to its min end (nothing changed).
--
-- The fence key is kept the retention past the new TTL, so that an acquire
-- repeated by the holder still finds the fence it holds. Without a record
-- this costs MGET, PEXPIRE and PEXPIRE GT, as GET did before records.
local v = redis.call('MGET', KEYS[1], KEYS[3])
if v[1] ~= ARGV[1] then
  return 0
end
local ttl = tonumber(ARGV[2])
if v[2] then
  hold_lib()
  local r = rec_parse(v[2])
  if r and r.tok == ARGV[1] then
    ttl = rec_ttl(r, ttl)
    if r.released or ttl <= 0 then
      return 0
    end
    redis.call('PEXPIRE', KEYS[3], ttl)
    keep(KEYS[4], ttl, 0)
  end
end
redis.call('PEXPIRE', KEYS[1], ttl)
keep(KEYS[2], ttl, tonumber(ARGV[3]))
return 1
