-- mutex_acquire: grant the plain mutex key to a token, or refresh it for the
-- token that already holds it; when refused, optionally register the caller
-- as a waiter that a release may hand the lock to. Interoperates with
-- "SET key token NX PX ttl".
--
-- KEYS[1]  lock key: holds the holder's token, nothing else
-- KEYS[2]  fence counter: the last fence issued for this lock name
-- KEYS[3]  waiters: sorted set, "<ttl ms> <#channel> <channel><token>" ->
--          deadline in server ms (the registration's lease)
-- KEYS[4]  the caller's wake-up channel: a shard channel in this slot on
--          which the caller's store listens for handoffs to its waiters (a
--          channel name, declared as a key so that it routes like one)
-- KEYS[5]  waiters flag: a string that outlives the waiters set, so that a
--          release learns from the read it makes anyway whether there may
--          be waiters to hand over to
-- ARGV[1]  token
-- ARGV[2]  TTL in milliseconds
-- ARGV[3]  how long a counter this grant creates is kept, in ms: the
--          fence retention, but at least TTL + 1 min
-- ARGV[4]  "1" when the caller expects the counter to exist (its store saw
--          the name before): a hint that picks the cheaper way to issue the
--          fence, never a condition of its correctness
-- ARGV[5]  optional: a proposed fence floor (redisproto.WithFenceFloor), or
--          "" for none
-- ARGV[6]  optional: "1" to register (or refresh) the caller as a waiter
--          when refused
-- ARGV[7]  with ARGV[6]: queue TTL in milliseconds: a registration not
--          refreshed by then is skipped, judged by this server's clock
--
-- A caller that does not queue may pass KEYS[1] and KEYS[2] alone and
-- ARGV[1] to ARGV[4] (or ARGV[5]): the script reads nothing else then, and
-- each key and argument costs the server time on every call.
--
-- Reply: the fence, an integer, when ARGV[1] holds the lock after the call
-- (a table costs the server more to reply than the call's own work); a repeat
-- by the holder (or by a waiter the lock was handed to) refreshes the TTL
-- and returns the fence it was granted with. {0, 0, pttl, 0, 0, held} when
-- another token or pattern holds it (pttl -1: the key has no TTL; otherwise
-- at least 1; held the dlock.Mode number: 0 for a token, another pattern's
-- from its marker, see name_lib).
--
-- A new fence is last + 1, or the clock floor, server time in ms * 1000,
-- when the counter is absent or behind the floor: a node that lost its data
-- in a restart still issues fences above every earlier one, and the counter
-- may expire (see docs/safety.md, "Fences on Valkey/Redis").
--
-- The free lock costs two calls on a name the caller saw before: SET NX
-- (which also tells a refusal from a repeat by the holder) and INCR on the
-- counter, which keeps the counter's expiry; three on a name new to it:
-- SET NX, TIME and SET GET, which creates the counter (or re-anchors one
-- to the clock and renews its expiry). Every refusal
-- reads the lock key with PTTL, a read that client-side caching tracks.
local me = ARGV[1]
local cur = redis.pcall('SET', KEYS[1], me, 'NX', 'PX', ARGV[2], 'GET')
if type(cur) == 'table' and cur.err then
  -- Before Redis 7.0 SET cannot combine NX with GET (a key of another type
  -- fails here too: the GET below raises its error).
  cur = redis.call('GET', KEYS[1])
  if not cur then
    redis.call('SET', KEYS[1], me, 'PX', ARGV[2])
  end
end
local fresh = not cur -- the SET granted it just now
if cur == me then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  local f = tonumber(redis.call('GET', KEYS[2]))
  if f then
    return f
  end
  -- The counter is gone (deleted by hand): issue a fresh fence below (the
  -- key is the holder's already, its TTL refreshed).
elseif cur then
  if ARGV[6] == '1' then
    local t = redis.call('TIME')
    local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    local qttl = tonumber(ARGV[7])
    redis.call('ZADD', KEYS[3], now + qttl, ARGV[2] .. ' ' .. #KEYS[4] .. ' ' .. KEYS[4] .. me)
    -- The set outlives every live registration, and the flag the set.
    if redis.call('PTTL', KEYS[3]) < qttl + 30000 then
      redis.call('PEXPIRE', KEYS[3], qttl + 60000)
      redis.call('SET', KEYS[5], '1', 'PX', qttl + 61000)
    end
  end
  -- PTTL is 0 in the last millisecond of a hold: report at least 1.
  local left = redis.call('PTTL', KEYS[1])
  if left == 0 then
    left = 1
  end
  -- Another pattern's marker (see name_lib) names the mode holding the
  -- name; a token is a mutex (0), dlock's or a foreign library's.
  local held = 0
  local m = string.match(cur, '^dlock:(%a+)')
  if m then
    held = ({reentrant = 1, read = 2, write = 3, fair = 4, semaphore = 5, election = 6})[m] or 0
  end
  return {0, 0, left, 0, 0, held}
end
if ARGV[6] == '1' then
  -- Free: a registered waiter takes it itself and is no longer waiting.
  redis.call('ZREM', KEYS[3], ARGV[2] .. ' ' .. #KEYS[4] .. ' ' .. KEYS[4] .. me)
end
-- The clock floor and the counter's values stay decimal strings where they
-- can: converting 16-digit numbers to and from strings costs the server more
-- than the calls around them.
local f
if ARGV[4] == '1' then
  -- The counter likely exists: INCR issues last + 1 in one call, keeping
  -- its expiry. A counter INCR had to create starts at the clock floor.
  f = redis.pcall('INCR', KEYS[2])
  if type(f) == 'number' and f < 1e15 then
    local now = redis.call('TIME')
    f = math.max(f, tonumber(now[1]) * 1000000 + math.floor(tonumber(now[2]) / 1000) * 1000)
    redis.call('SET', KEYS[2], string.format('%.0f', f), 'PX', ARGV[3])
  end
else
  -- The counter likely does not exist: SET GET writes the clock floor and
  -- returns the last fence in one call; only a last fence at or above the
  -- floor needs a second SET. The floor's digits are TIME's seconds and
  -- the milliseconds of its microseconds, then "000".
  local now = redis.call('TIME')
  local us = now[2]
  local ms = '0'
  if #us > 3 then
    ms = string.sub(us, 1, #us - 3)
  end
  local fs = now[1] .. string.rep('0', 3 - #ms) .. ms .. '000'
  f = tonumber(now[1]) * 1000000 + tonumber(ms) * 1000
  if ARGV[5] and ARGV[5] ~= '' then
    -- A floor proposed by store/redlock to every node of one grant, so that
    -- they issue the same fence: taken above this node's clock floor by at
    -- most 100 ms, which bounds how far this counter runs ahead of it.
    local p = tonumber(ARGV[5])
    if p and p > f and p <= f + 100000 then
      f, fs = p, ARGV[5]
    end
  end
  local last = redis.pcall('SET', KEYS[2], fs, 'PX', ARGV[3], 'GET')
  if type(last) == 'table' then
    f = last
  elseif last and #last >= #fs and (#last > #fs or last >= fs) then
    -- Canonical decimals of one length compare as strings.
    local n = tonumber(last)
    if n then
      f = n + 1
      redis.call('SET', KEYS[2], string.format('%.0f', f), 'PX', ARGV[3])
    end
  end
end
if type(f) == 'table' and f.err then
  -- The counter is not an integer string: undo the grant, fail as before.
  if fresh then
    redis.call('DEL', KEYS[1])
  end
  return f
end
return f
