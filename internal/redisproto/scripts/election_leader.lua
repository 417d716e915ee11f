-- election_leader: describe the current leader without revealing its token.
--
-- KEYS[1]  leadership (see election_acquire)
--
-- Reply, as strings: {term, pttl, value} while a leader holds the name
-- (pttl at least 1, -1 without expiry); {} when nobody leads.
local v = redis.call('HMGET', KEYS[1], 'f', 'v')
if not v[1] then
  return {}
end
local left = redis.call('PTTL', KEYS[1])
if left == 0 then
  left = 1
end
return {v[1], tostring(left), v[2] or ''}
