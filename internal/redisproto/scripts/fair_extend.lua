-- fair_extend: compare-and-pexpire of the fair lock's holder. KEYS and
-- ARGV: see fair_lib.
--
-- Reply: 1 when ARGV[1] holds the lock and its TTL is now ARGV[2]; 0 when it
-- does not, or another holder of the main key has the name (see name_lib):
-- nothing changed. Queue places are refreshed by fair_acquire.
if holder() ~= ARGV[1] then
  return 0
end
if blocker(own) then
  return 0 -- another holder has the name: this hold is not the lock's
end
redis.call('PEXPIRE', H, ARGV[2])
mark('dlock:fair', tonumber(ARGV[2]), own)
keep_fence(tonumber(ARGV[2]))
return 1
