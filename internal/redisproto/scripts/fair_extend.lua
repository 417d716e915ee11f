-- fair_extend: compare-and-pexpire of the fair lock's holder. KEYS and
-- ARGV: see fair_lib.
--
-- Reply: 1 when ARGV[1] holds the lock and its TTL is now ARGV[2], capped
-- at its record's max end; 0 when it does not, another holder of the main
-- key has the name (see name_lib), the max end passed, or a release left
-- it to its min end: nothing changed. Queue places are refreshed by fair_acquire.
if holder() ~= ARGV[1] then
  return 0
end
if blocker(own) then
  return 0 -- another holder has the name: this hold is not the lock's
end
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
return 1
