-- fair_release: give up the fair lock, handing it to the live head waiter
-- in the same script, or leave the queue. KEYS and ARGV: see fair_lib.
--
-- Reply: 1 when ARGV[1] held the lock (now released, and handed over if
-- anyone waits) or had a place in the queue (now dropped); 0 when it had
-- neither (nothing changed).
local me = ARGV[1]
prune()
local tok, f = holder()
if tok == me then
  audit('release', f, me)
  redis.call('DEL', H)
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
