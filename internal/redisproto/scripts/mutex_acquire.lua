-- mutex_acquire: grant the plain mutex key to a token, or refresh it for the
-- token that already holds it; when refused, optionally register the caller
-- as a waiter that a release may hand the lock to. Interoperates with
-- "SET key token NX PX ttl".
--
-- KEYS[1]  lock key: holds the holder's token, nothing else
-- KEYS[2]  fence key: the last fence issued for this lock name, kept beside
--          the hold (see clock_lib)
-- KEYS[3]  waiters: sorted set, "<ttl ms> <#channel> <channel><token>" ->
--          deadline in server ms (the registration's lease)
-- KEYS[4]  the caller's wake-up channel: a shard channel in this slot on
--          which the caller's store listens for handoffs to its waiters (a
--          channel name, declared as a key so that it routes like one)
-- KEYS[5]  waiters flag: a string that outlives the waiters set, so that a
--          release learns from the read it makes anyway whether there may
--          be waiters to hand over to
-- KEYS[6]  the hold's record (see hold_lib), in the full form (7 keys)
-- KEYS[7]  the fence mark of the lock's hash slot (see clock_lib); the last
--          key in either form
-- ARGV[1]  token
-- ARGV[2]  TTL in milliseconds
-- ARGV[3]  fence retention in ms: the fence key is kept this long past
--          the hold's TTL
-- ARGV[4]  the fence key's TTL on a grant, ARGV[2] + ARGV[3], as a
--          decimal string (the server would format it: see issue in
--          clock_lib), or "" to have the script add them (until 2026-12
--          unused: a hint of the versions before 2026-11)
-- ARGV[5]  optional: a proposed fence floor (redisproto.WithFenceFloor), or
--          "" for none
-- ARGV[6]  optional: "1" to register (or refresh) the caller as a waiter
--          when refused
-- ARGV[7]  with ARGV[6]: queue TTL in milliseconds: a registration not
--          refreshed by then is skipped, judged by this server's clock
-- ARGV[8..11] optional, full form: the request's record (see hold_lib):
--          a new grant records it in KEYS[6], with the hold's TTL, and sets
--          the waiters flag to outlive it ("r" when it was not set: a
--          record and no waiter), so that every release takes the full form, which reads the record (a release before its min
--          end leaves the key to expire there). ARGV[2] is then at most
--          the max hold. A repeat by the holder is capped at its record's
--          max end.
--
-- A caller that does not queue nor record may pass KEYS[1], KEYS[2] and the mark alone
-- and ARGV[1] to ARGV[4] (or ARGV[5]): the script reads nothing else then,
-- and each key and argument costs the server time on every call.
--
-- Reply: the fence, an integer, when ARGV[1] holds the lock after the call
-- (a table costs the server more to reply than the call's own work); a repeat
-- by the holder (or by a waiter the lock was handed to) refreshes the TTL
-- and returns the fence it was granted with. {0, 0, pttl, 0, 0, held} when
-- another token or pattern holds it (pttl -1: the key has no TTL; otherwise
-- at least 1; held the dlock.Mode number: 0 for a token, another pattern's
-- from its marker, see name_lib).
--
-- A new fence is max(the fence key's value + 1, the clock floor server
-- time in ms * 1000), or, when the key is absent, max(the slot's mark + 1,
-- the clock floor) (see clock_lib and docs/safety.md, "Fences on
-- Valkey/Redis").
--
-- The free lock costs SET NX (which also tells a refusal from a repeat by
-- the holder), then TIME, SET NX GET and ZADD on a new name, and TIME, SET
-- NX GET, SET KEEPTTL, PEXPIRE GT and ZADD on a name whose fence key is
-- there (see issue in clock_lib). Every refusal reads the lock key with
-- PTTL, a read that client-side caching tracks.
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
-- The fast path's script (3 keys) is this file after clock_lib alone, so
-- that it makes no closure for hold_lib; the full form's has hold_lib too
-- (redisproto.Ops.FullAcquire).
local HOLD = #KEYS == 7 and KEYS[6]
if HOLD then
  hold_lib()
end
local rec
if cur == me then
  local ttl = ARGV[2]
  if HOLD then
    rec = rec_parse(redis.call('GET', HOLD))
    if rec and rec.tok ~= me then
      rec = nil
    end
    if rec then
      if rec.released then
        -- Released, kept to its min end: not the caller's any more.
        return {0, 0, math.max(redis.call('PTTL', KEYS[1]), 1), 0, 0, 0}
      end
      ttl = dec(math.max(rec_ttl(rec, tonumber(ttl)), 1))
      redis.call('PEXPIRE', HOLD, ttl)
      keep(KEYS[5], tonumber(ttl), 0)
    end
  end
  redis.call('PEXPIRE', KEYS[1], ttl)
  local f = tonumber(redis.call('GET', KEYS[2]))
  if f then
    keep(KEYS[2], tonumber(ttl), tonumber(ARGV[3]))
    return f
  end
  -- The fence key is gone (deleted by hand): issue a fresh fence below (the
  -- lock key is the holder's already, its TTL refreshed).
elseif cur then
  if ARGV[6] == '1' then
    local t = redis.call('TIME')
    local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    local qttl = tonumber(ARGV[7])
    redis.call('ZADD', KEYS[3], now + qttl, ARGV[2] .. ' ' .. #KEYS[4] .. ' ' .. KEYS[4] .. me)
    -- The set outlives every live registration, and the flag the set.
    if redis.call('PTTL', KEYS[3]) < qttl + 30000 then
      redis.call('PEXPIRE', KEYS[3], qttl + 60000)
      -- "1" (a record's "r" says there is no waiter), never shortened:
      -- it outlives a record too (see ARGV[8]).
      if redis.call('SET', KEYS[5], '1', 'XX', 'KEEPTTL') then
        keep(KEYS[5], qttl + 61000, 0)
      else
        redis.call('SET', KEYS[5], '1', 'PX', qttl + 61000)
      end
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
local floor
if ARGV[5] and ARGV[5] ~= '' then
  floor = tonumber(ARGV[5])
end
local px
if ARGV[4] ~= '' then
  px = ARGV[4]
end
local f, e = issue(KEYS[2], KEYS[#KEYS], tonumber(ARGV[2]), tonumber(ARGV[3]), floor, px)
if not f then
  -- The fence key is not an integer, or the mark not a sorted set: undo a
  -- grant made just now, fail.
  if not cur then
    redis.call('DEL', KEYS[1])
  end
  return e
end
if HOLD and not rec and rec_wanted(8) then
  -- The record, and the flag that sends every release to the full form.
  redis.call('SET', HOLD, rec_new(me, f, rec_argv(8)), 'PX', ARGV[2])
  if not redis.call('SET', KEYS[5], 'r', 'NX', 'PX', ARGV[2]) then
    keep(KEYS[5], tonumber(ARGV[2]), 0)
  end
end
return f
