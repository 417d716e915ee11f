-- election_raise_fence: settle the term of a leadership held by a token.
-- Fenced Redlock (store/redlock) calls it on the nodes of its majority once
-- it has picked the term F of a grant: the fence counter becomes at least F,
-- so that every later grant on the node is issued a higher fence, and the
-- leadership takes F as its term and the value the quorum reports.
--
-- KEYS[1]  leadership (see election_acquire)
-- KEYS[2]  fence key (see clock_lib)
-- KEYS[3]  gate (see election_acquire): written again, which wakes
--          observers to read the settled leadership
-- KEYS[4]  the hold's record (unused; see election_acquire)
-- KEYS[5]  main key (see name_lib)
-- KEYS[6]  the fence mark of the lock's hash slot (see clock_lib)
-- ARGV[1]  token
-- ARGV[2]  fence F (a positive integer below 2^53)
-- ARGV[3]  fence retention in milliseconds (see election_acquire)
-- ARGV[4]  the leadership's value from now on
--
-- Reply: 1 when ARGV[1] leads; the fence key, the slot's mark and the term
-- are then at least ARGV[2] (none is ever lowered; the fence key is kept
-- ARGV[3] past the hold's remaining TTL). 0 when it does not lead,
-- or another holder has the name; nothing changed.
local H = KEYS[1]
if redis.call('HGET', H, 't') ~= ARGV[1] then
  return 0
end
if blocker(function(v) return v == 'dlock:election' end) then
  return 0
end
local f = tonumber(ARGV[2])
local left = redis.call('PTTL', H)
raise(KEYS[2], KEYS[#KEYS], f, left, tonumber(ARGV[3]))
if f > tonumber(redis.call('HGET', H, 'f')) then
  redis.call('HSET', H, 'f', ARGV[2])
end
redis.call('HSET', H, 'v', ARGV[4])
if left > 0 then
  redis.call('SET', KEYS[3], redis.call('HGET', H, 'f'), 'PX', left)
end
return 1
