-- mutex_release: compare-and-delete, handing the lock over to a live
-- registered waiter in the same script; or drop the caller's registration.
--
-- KEYS[1]  lock key
-- KEYS[2]  fence key (see mutex_acquire; kept: it expires the fence
--          retention after the hold's TTL)
-- KEYS[3]  waiters (see mutex_acquire)
-- KEYS[4]  the caller's wake-up channel (see mutex_acquire)
-- KEYS[5]  waiters flag (see mutex_acquire): absent, there is no waiter
--          and no record; "r", a record and no waiter
-- KEYS[6]  the hold's record (see hold_lib): deleted with the hold; or,
--          before its min end, the hold is left to expire there (the lock
--          key and the record then expire at the min end, the record marked
--          released, and nobody is handed the lock)
-- KEYS[7]  the fence mark of the lock's hash slot (see clock_lib)
-- ARGV[1]  token
-- ARGV[2]  TTL in milliseconds (names the caller's registration)
-- ARGV[3]  fence retention in milliseconds (see mutex_acquire)
--
-- A name the caller has not seen waiters on is released by
-- mutex_release_short instead, with KEYS[1] and the flag alone.
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
--
-- Without waiters this costs two calls: MGET of the lock key, the flag and
-- the record (the compare, and whether there may be waiters), then DEL.
local me = ARGV[1]
local flag = KEYS[5]
local v = redis.call('MGET', KEYS[1], flag, KEYS[6])
if v[1] ~= me then
  if not v[2] then
    return 0
  end
  return redis.call('ZREM', KEYS[3], ARGV[2] .. ' ' .. #KEYS[4] .. ' ' .. KEYS[4] .. me)
end
local hold -- the record's key, when it is the caller's
if v[3] then
  hold_lib()
  local r = rec_parse(v[3])
  if r and r.tok == me then
    if r.released then
      return 1 -- released already, kept to its min end
    end
    if rec_kept(r) then
      local at = dec(r.min)
      redis.call('PEXPIREAT', KEYS[1], at)
      redis.call('SET', KEYS[6], rec_released(r), 'PXAT', at)
      redis.call('PEXPIREAT', flag, at, 'GT')
      keep(KEYS[2], r.min - now(), tonumber(ARGV[3]))
      return 1
    end
    hold = KEYS[6]
  end
end
if v[2] == 'r' then
  -- A record and no waiter: the record and the flag go with the key.
  redis.call('DEL', KEYS[1], flag, hold or flag)
  return 1
end
if hold then
  redis.call('DEL', hold)
end
while v[2] do
  local e = redis.call('ZPOPMIN', KEYS[3])
  if #e == 0 then
    -- No waiter left: the next release need not look.
    redis.call('DEL', flag)
    break
  end
  if tonumber(e[2]) > now() then
    local ttl, n, rest = string.match(e[1], '^(%d+) (%d+) (.*)$')
    n = tonumber(n)
    if ttl and n and #rest > n then
      local ch, tok = string.sub(rest, 1, n), string.sub(rest, n + 1)
      -- The fence as in mutex_acquire.
      local fs = dec(issue_or_fail(KEYS[2], KEYS[7], tonumber(ttl), tonumber(ARGV[3])))
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
