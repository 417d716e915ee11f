-- mutex_release: compare-and-delete, handing the lock over to a live
-- registered waiter in the same script; or drop the caller's registration.
--
-- KEYS[1]  lock key
-- KEYS[2]  fence counter (kept: fences stay monotonic)
-- KEYS[3]  waiters (see mutex_acquire)
-- KEYS[4]  the caller's wake-up channel (see mutex_acquire)
-- KEYS[5]  waiters flag (see mutex_acquire): absent, there is no waiter
-- ARGV[1]  token
-- ARGV[2]  TTL in milliseconds (names the caller's registration)
-- ARGV[3]  counter keep in milliseconds: the fence retention, at least
--          TTL + 1 min (see mutex_acquire)
--
-- The short form, for a name the caller has not seen waiters on, is KEYS[1]
-- and the flag alone, and ARGV[1]: each key and argument costs the server
-- time on every call.
--
-- Reply: 1 when ARGV[1] held the lock (now released, or handed to a
-- waiter) or was registered as a waiter (now dropped); 0 when it had
-- neither (nothing changed); -1, in the short form only, when the flag is
-- set: there may be waiters to hand over to or a registration to drop, and
-- nothing changed; the caller sends the full form.
--
-- A handoff pops the registration with the earliest deadline, skipping
-- those whose deadline passed (their waiters stopped refreshing them), and
-- sets the lock key to the waiter's token with the waiter's TTL and a new
-- fence, exactly as the waiter's own acquire would have; then it publishes
-- "<sha1hex(token)> <fence>" on the waiter's channel (SPUBLISH; PUBLISH on
-- servers before Redis 7), so only the waiter's store hears of it and the
-- token itself never travels.
--
-- Without waiters this costs two calls: MGET of the lock key and the flag
-- (the compare, and whether there may be waiters), then DEL.
local me = ARGV[1]
local flag = KEYS[#KEYS]
local v = redis.call('MGET', KEYS[1], flag)
if v[2] and #KEYS < 5 then
  return -1
end
if v[1] ~= me then
  if not v[2] then
    return 0
  end
  return redis.call('ZREM', KEYS[3], ARGV[2] .. ' ' .. #KEYS[4] .. ' ' .. KEYS[4] .. me)
end
local now
while v[2] do
  local e = redis.call('ZPOPMIN', KEYS[3])
  if #e == 0 then
    -- No waiter left: the next release need not look.
    redis.call('DEL', flag)
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
      -- The fence as in mutex_acquire: INCR, or the clock floor.
      local f = redis.call('INCR', KEYS[2])
      if f < 1e15 then
        f = math.max(f, now[1] * 1000000 + math.floor(now[2] / 1000) * 1000)
        local keep = string.format('%.0f', math.max(tonumber(ARGV[3]), tonumber(ttl) + 60000))
        redis.call('SET', KEYS[2], string.format('%.0f', f), 'PX', keep)
      end
      local fs = string.format('%.0f', f)
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
