-- fair_force: end the fair lock's hold without its token
-- (store.ForceReleaser), even one a release left to its min end, and hand
-- it to the live head waiter as a release does. KEYS: see fair_lib; ARGV
-- unused but ARGV[7], the fence retention.
--
-- Reply: {holder, since, data, fence} of the hold ended (see rec_owner),
-- or {} when nobody holds it. Queue places and the fence key stay.
local tok, f = holder()
if not tok then
  return {}
end
local owner = rec_owner(record(tok), f)
audit('release', f, tok)
redis.call('DEL', H, REC)
prune()
if not promote() then
  mark('dlock:fair', 0, own)
end
return owner
