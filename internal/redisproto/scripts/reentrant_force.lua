-- reentrant_force: end the reentrant hold of a name, every acquisition of
-- it, without a token (store.ForceReleaser). KEYS as reentrant_extend's;
-- ARGV unused.
--
-- Reply: {holder, since, data, fence} of the hold ended (see rec_owner),
-- or {} when nobody holds it. The fence key stays; the gate and the main
-- key go, which wakes waiters.
local f = tonumber(redis.call('HGET', KEYS[1], 'f'))
if not f then
  return {}
end
local r = rec_parse(redis.call('GET', KEYS[4]))
if r and r.fence ~= f then
  r = nil
end
redis.call('DEL', KEYS[1], KEYS[3], KEYS[4])
mark('dlock:reentrant', 0, function(v) return v == 'dlock:reentrant' end)
return rec_owner(r, f)
