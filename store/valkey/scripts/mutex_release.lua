-- mutex_release: compare-and-delete, handing the lock over to a live
-- registered waiter in the same script; or drop the caller's registration.
--
-- KEYS[1]  lock key
-- KEYS[2]  fence counter (kept: fences stay monotonic)
-- KEYS[3]  waiters (see mutex_acquire)
-- KEYS[4]  the caller's wake-up channel (see mutex_acquire)
-- ARGV[1]  token
-- ARGV[2]  TTL in milliseconds (names the caller's registration)
--
-- Reply: 1 when ARGV[1] held the lock (now released, or handed to a
-- waiter) or was registered as a waiter (now dropped); 0 when it had
-- neither (nothing changed).
--
-- A handoff pops the registration with the earliest deadline, skipping
-- those whose deadline passed (their waiters stopped refreshing them), and
-- sets the lock key to the waiter's token with the waiter's TTL and a new
-- fence, exactly as the waiter's own acquire would have; then it publishes
-- "<sha1hex(token)> <fence>" on the waiter's channel (SPUBLISH; PUBLISH on
-- servers before Redis 7), so only the waiter's store hears of it and the
-- token itself never travels.
local me = ARGV[1]
if redis.call('GET', KEYS[1]) ~= me then
  return redis.call('ZREM', KEYS[3], ARGV[2] .. ' ' .. #KEYS[4] .. ' ' .. KEYS[4] .. me)
end
local now
while true do
  local e = redis.call('ZPOPMIN', KEYS[3])
  if #e == 0 then
    break
  end
  if not now then
    local t = redis.call('TIME')
    now = {tonumber(t[1]), tonumber(t[2])}
  end
  if tonumber(e[2]) > now[1] * 1000 + math.floor(now[2] / 1000) then
    local ttl, n, rest = string.match(e[1], '^(%d+) (%d+) (.*)$')
    n = tonumber(n)
    if ttl and n and #rest > n then
      local ch, tok = string.sub(rest, 1, n), string.sub(rest, n + 1)
      local floor = now[1] * 1000000 + math.floor(now[2] / 1000) * 1000
      local f = math.max((tonumber(redis.call('GET', KEYS[2])) or 0) + 1, floor)
      local fs = string.format('%.0f', f)
      redis.call('SET', KEYS[2], fs, 'PX', 86400000)
      redis.call('SET', KEYS[1], tok, 'PX', ttl)
      local msg = redis.sha1hex(tok) .. ' ' .. fs
      local r = redis.pcall('SPUBLISH', ch, msg)
      if type(r) == 'table' and r.err then
        redis.call('PUBLISH', ch, msg)
      end
      return 1
    end
  end
end
redis.call('DEL', KEYS[1])
return 1
