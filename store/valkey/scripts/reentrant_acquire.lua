-- reentrant_acquire: take or re-enter the reentrant lock.
--
-- KEYS[1]  hold: hash, "o" -> owner, "f" -> fence of the first grant,
--          "t:"..token -> 1 for each live acquisition; its TTL is the hold's,
--          so when it runs out every acquisition ends at once
-- KEYS[2]  fence counter: the last fence issued for this lock name
-- KEYS[3]  gate: string with the hold's TTL, deleted with the hold; the key
--          waiters watch (CLIENT TRACKING)
-- ARGV[1]  token (one per acquisition)
-- ARGV[2]  TTL in milliseconds
-- ARGV[3]  owner (the token when not given)
-- ARGV[7]  fence retention in milliseconds: a grant keeps the fence counter
--          for max(ARGV[7], TTL + 1 min)
--
-- Reply: {1, fence, 0, count} when ARGV[1] holds an acquisition after the
-- call: count is the owner's live acquisitions, fence that of the first
-- grant; a repeat by the same token changes nothing but the TTL. The hold's
-- TTL is raised to ARGV[2], never lowered. {0, 0, pttl} when another owner
-- holds the lock.
local H, F, G = KEYS[1], KEYS[2], KEYS[3]
local me, ttl, owner = ARGV[1], tonumber(ARGV[2]), ARGV[3]
if redis.call('EXISTS', H) == 1 then
  if redis.call('HEXISTS', H, 't:' .. me) == 0 then
    if redis.call('HGET', H, 'o') ~= owner then
      return {0, 0, redis.call('PTTL', H)}
    end
    redis.call('HSET', H, 't:' .. me, 1)
  end
  if redis.call('PTTL', H) < ttl then
    redis.call('PEXPIRE', H, ttl)
    redis.call('SET', G, '1', 'PX', ttl)
  end
  return {1, tonumber(redis.call('HGET', H, 'f')), 0, redis.call('HLEN', H) - 2}
end
local t = redis.call('TIME')
local f = math.max((tonumber(redis.call('GET', F)) or 0) + 1, tonumber(t[1]) * 1000000 + math.floor(tonumber(t[2]) / 1000) * 1000)
redis.call('SET', F, string.format('%.0f', f), 'PX', string.format('%.0f', math.max(tonumber(ARGV[7]), ttl + 60000)))
redis.call('HSET', H, 'o', owner, 'f', string.format('%.0f', f), 't:' .. me, 1)
redis.call('PEXPIRE', H, ttl)
redis.call('SET', G, '1', 'PX', ttl)
return {1, f, 0, 1}
