-- election_force: end a leadership without its token
-- (store.ForceReleaser), even one a release left to its min end. KEYS as
-- election_extend's; ARGV unused.
--
-- Reply: {holder, since, data, term} of the leadership ended (see
-- rec_owner), or {} when nobody leads. The fence key stays; the gate and
-- the main key go, which wakes candidates and observers.
local e = redis.call('HMGET', KEYS[1], 't', 'f')
if not e[1] then
  return {}
end
local f = tonumber(e[2]) or 0
local r = rec_parse(redis.call('GET', KEYS[4]))
if r and r.tok ~= e[1] then
  r = nil
end
redis.call('DEL', KEYS[1], KEYS[3], KEYS[4])
mark('dlock:election', 0, function(v) return v == 'dlock:election' end)
return rec_owner(r, f)
