-- mutex_acquire: grant the plain mutex key to a token, or refresh it for the
-- token that already holds it. Interoperates with "SET key token NX PX ttl".
--
-- KEYS[1]  lock key: holds the holder's token, nothing else
-- KEYS[2]  fence counter: the last fence issued for this lock name
-- ARGV[1]  token
-- ARGV[2]  TTL in milliseconds
--
-- Reply: {1, fence, 0} when ARGV[1] holds the lock after the call; a repeat
-- by the holder refreshes the TTL and returns the fence it was granted with.
-- {0, 0, pttl} when another token holds it (pttl -1: the key has no TTL;
-- otherwise at least 1).
--
-- A new fence is max(last + 1, server time in ms * 1000): a node that lost
-- its data in a restart still issues fences above every earlier one, and the
-- counter may expire a day after the last grant.
local cur = redis.call('GET', KEYS[1])
if cur == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  local f = tonumber(redis.call('GET', KEYS[2]))
  if f then
    return {1, f, 0}
  end
  -- The counter is gone (deleted by hand): issue a fresh fence below.
elseif cur then
  -- PTTL is 0 in the last millisecond of a hold: report at least 1.
  local left = redis.call('PTTL', KEYS[1])
  if left == 0 then
    left = 1
  end
  return {0, 0, left}
end
local now = redis.call('TIME')
local floor = tonumber(now[1]) * 1000000 + math.floor(tonumber(now[2]) / 1000) * 1000
local f = math.max((tonumber(redis.call('GET', KEYS[2])) or 0) + 1, floor)
redis.call('SET', KEYS[2], string.format('%.0f', f), 'PX', 86400000)
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return {1, f, 0}
