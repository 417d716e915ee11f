-- rw_force: end every read and write lease of the read-write lock without
-- their tokens (store.ForceReleaser). KEYS: see rw_lib; ARGV unused.
-- Writers' intents (queue places) stay.
--
-- Reply: {holder, since, data, fence} per lease ended (see rec_owner), or
-- {} when nobody holds it. The fence key stays; the gate and the main key
-- go, which wakes waiters.
prune()
local out = {}
for _, tok in ipairs(redis.call('ZRANGE', R, 0, -1)) do
  local f = tonumber(redis.call('HGET', M, 'f:' .. tok)) or 0
  for _, x in ipairs(rec_owner(rec_parse(redis.call('HGET', HS, tok)), f)) do
    out[#out + 1] = x
  end
  drop(tok)
end
redis.call('DEL', G, HS)
sync()
return out
