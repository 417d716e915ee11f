-- rw_extend: renew a read or write lease. KEYS and ARGV: see rw_lib.
--
-- Reply: 1 when ARGV[1] holds the lock and its lease now ends ARGV[2] ms from
-- now; 0 when it does not (nothing changed).
if blocker(own) then
  return 0 -- another holder has the name: this hold is not the lock's
end
if refresh(ARGV[1], tonumber(ARGV[2])) then
  sync()
  return 1
end
return 0
