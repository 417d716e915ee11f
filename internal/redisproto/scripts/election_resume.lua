-- election_resume: take back a leadership by its token (store.Resumer).
-- KEYS and ARGV as election_extend's.
--
-- Reply: {term, ttl, max hold left} when ARGV[1] leads (its TTL now ttl
-- ms, capped at its record's max end); 0 when it does not, another holder
-- has the name, the max end passed, or a release left it to its min end
-- (nothing changed).
local me = ARGV[1]
if redis.call('HGET', KEYS[1], 't') ~= me then
  return 0
end
local function own(v) return v == 'dlock:election' end
if blocker(own) then
  return 0
end
local ttl = tonumber(ARGV[2])
local r = rec_parse(redis.call('GET', KEYS[4]))
if r and r.tok ~= me then
  r = nil
end
if r then
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
return {tonumber(redis.call('HGET', KEYS[1], 'f')), ttl, rec_left(r)}
