-- semaphore_force: end every permit of the semaphore without their tokens
-- (store.ForceReleaser). KEYS: see semaphore_lib; ARGV unused.
--
-- Reply: {holder, since, data, fence} per permit ended (see rec_owner), or
-- {} when none is held. The fence key stays; the gate and the main key go,
-- which wakes waiters.
prune()
local out = {}
for _, tok in ipairs(redis.call('ZRANGE', R, 0, -1)) do
  local f = tonumber(redis.call('HGET', M, 'f:' .. tok)) or 0
  for _, x in ipairs(rec_owner(rec_parse(redis.call('HGET', HS, tok)), f)) do
    out[#out + 1] = x
  end
  drop(tok)
end
if #out > 0 then
  redis.call('DEL', G, M, HS)
  mark('dlock:semaphore:', 0, own)
end
return out
