-- fair_resume: take back the fair lock by its holder's token
-- (store.Resumer). KEYS and ARGV: see fair_lib.
--
-- Reply: {fence, ttl, max hold left} when ARGV[1] holds the lock (its TTL
-- now ttl ms, ARGV[2] capped at its record's max end); 0 when it does not,
-- another holder has the name, the max end passed, or a release left it to
-- its min end (nothing changed).
if holder() ~= ARGV[1] then
  return 0
end
if blocker(own) then
  return 0
end
local _, f = holder()
local ttl = tonumber(ARGV[2])
local r = record(ARGV[1])
if r then
  ttl = rec_ttl(r, ttl)
  if r.released or ttl <= 0 then
    return 0
  end
  redis.call('PEXPIRE', REC, ttl)
end
redis.call('PEXPIRE', H, ttl)
mark('dlock:fair', ttl, own)
keep_fence(ttl)
return {f, ttl, rec_left(r)}
