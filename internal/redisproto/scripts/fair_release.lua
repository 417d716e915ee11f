-- fair_release: give up the fair lock, handing it to the live head waiter
-- in the same script, or leave the queue. KEYS and ARGV: see fair_lib.
--
-- Reply: 1 when ARGV[1] held the lock (now released, and handed over if
-- anyone waits; or, before its record's min end, left to expire there,
-- the record marked released) or had a place in the queue (now dropped); 0 when it had
-- neither (nothing changed).
local me = ARGV[1]
prune()
local tok, f = holder()
if tok == me then
  local r = record(me)
  if r and r.released then
    return 1 -- released already, kept to its min end
  end
  if rec_kept(r) then
    -- Left to expire at the min end: nobody is handed the lock before.
    local at = dec(r.min)
    redis.call('PEXPIREAT', H, at)
    redis.call('SET', REC, rec_released(r), 'PXAT', at)
    mark('dlock:fair', r.min - now(), own)
    keep_fence(r.min - now())
    return 1
  end
  audit('release', f, me)
  redis.call('DEL', H, REC)
  if not promote() then -- a handoff writes the holder and the main key
    mark('dlock:fair', 0, own)
  end
  return 1
end
if redis.call('ZSCORE', Q, me) then
  unqueue(me)
  if not tok then
    promote()
  end
  return 1
end
return 0
