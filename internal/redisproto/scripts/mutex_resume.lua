-- mutex_resume: take back a mutex hold by its token (store.Resumer): the
-- compare of mutex_extend, the same extension capped at the record's max
-- end, and the hold's fence.
--
-- KEYS     as mutex_extend's
-- ARGV     as mutex_extend's
--
-- Reply: {fence, ttl, max hold left} when ARGV[1] holds the lock (its TTL
-- now ttl ms; max hold left 0 without one); 0 when it does not, its max
-- end passed, or a release left it to its min end (nothing changed). The
-- fence is the record's, or the fence key's (the last issued, the holder's
-- unless raised since), or, both gone, a new one.
hold_lib()
local me = ARGV[1]
local v = redis.call('MGET', KEYS[1], KEYS[3])
if v[1] ~= me then
  return 0
end
local ttl, r = tonumber(ARGV[2]), rec_parse(v[2])
if r and r.tok ~= me then
  r = nil
end
if r then
  ttl = rec_ttl(r, ttl)
  if r.released or ttl <= 0 then
    return 0
  end
  redis.call('PEXPIRE', KEYS[3], ttl)
  keep(KEYS[4], ttl, 0)
end
redis.call('PEXPIRE', KEYS[1], ttl)
local f = tonumber(redis.call('GET', KEYS[2]))
if f then
  keep(KEYS[2], ttl, tonumber(ARGV[3]))
elseif r then
  f = r.fence
  raise(KEYS[2], KEYS[#KEYS], f, ttl, tonumber(ARGV[3]))
else
  f = issue_or_fail(KEYS[2], KEYS[#KEYS], ttl, tonumber(ARGV[3]))
end
return {f, ttl, rec_left(r)}
