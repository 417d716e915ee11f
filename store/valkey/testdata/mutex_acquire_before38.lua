-- clock_lib: the server clock and the fences, prepended to every script
-- that issues, keeps or raises fences. The patterns' scripts (read-write,
-- fair, semaphore, reentrant, election) call fence, keep_fence and
-- raise_fence, for which KEYS[2] is the lock name's fence key, the last key
-- (KEYS[#KEYS], after the main key) its slot's fence mark, ARGV[7] the
-- fence retention in milliseconds and ARGV[8], when given, a fence floor
-- proposed by store/redlock; the mutex and multi-lock scripts call
-- issue, keep and raise with their own keys.
--
-- Two keys carry the fences (see docs/safety.md, "Fences on Valkey/Redis"):
--
--   - the name's fence key, "{lock:<name>}:fence": the last fence issued for
--     the name, kept beside its holds, expiring the retention (ARGV) after
--     the end of the last hold's TTL that a grant or extension set;
--   - the fence mark of the name's hash slot, one key per slot and no
--     expiry (redisproto.Layout.Mark), a sorted set whose member "m" scores
--     at least every fence issued on a name of the slot since the node last
--     started empty.
--
-- Every grant issues max(fence key + 1, clock floor), or, when the fence
-- key is absent, max(mark + 1, clock floor), the clock floor being server
-- time in ms * 1000: the floor on every grant, because a restart from an
-- RDB snapshot or AOF everysec, or a failover to a replica that lagged,
-- brings the fence key and the mark back stale (on 636d7c8, which took the
-- floor only when the key was absent, fences repeated so). Either sets the
-- fence key, whose expiry a grant only ever raises, and raises the mark. A
-- version of dlock before 2026-11 keeps only the fence key (then a counter
-- kept a day): its grants INCR the key when it exists and start it at the
-- clock floor otherwise, so a fleet mixing the two issues increasing fences
-- on a name (docs/safety.md states the bound on clock steps this takes).

local now_ms
-- now is the server's time in milliseconds, read once per script.
local function now()
  if not now_ms then
    local t = redis.call('TIME')
    now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end
  return now_ms
end

local function dec(n) return string.format('%.0f', n) end

-- keep makes fence key fk outlive a hold that now ends ttl ms from now by
-- rho ms, never shortening it (a key that is gone stays gone, one without
-- an expiry keeps none).
--
-- PEXPIRE GT does it in one call from Redis 7.0 on (GT leaves a key without
-- an expiry and a missing key alone); before, PTTL and PEXPIRE.
local function keep(fk, ttl, rho)
  local r = redis.pcall('PEXPIRE', fk, dec(ttl + rho), 'GT')
  if type(r) == 'table' and r.err then
    local left = redis.call('PTTL', fk)
    if left >= 0 and left < ttl + rho then
      redis.call('PEXPIRE', fk, dec(ttl + rho))
    end
  end
end

-- issue issues the next fence of the name whose fence key is fk and whose
-- slot's mark is mk, for a grant of ttl ms kept rho ms after its TTL:
-- max(last + 1, clock floor), last the fence key's value, or the mark's
-- when the key is absent. floor, if any, is a floor proposed by
-- store/redlock: taken when it is above that fence by at most 100 ms of
-- this node's clock floor (so that nodes of one grant issue the same
-- fence). A fence key that holds anything but an integer raises an error,
-- writing nothing.
--
-- The fence key's expiry is only ever raised (SET KEEPTTL, then keep): a
-- grant of a shared hold must not cut the key of a longer hold beside it,
-- and a key that expires by a clock that stepped back no sooner than every
-- write of it asked keeps a mixed fleet's fences rising (docs/safety.md,
-- Claim 3).
--
-- The mark is a sorted set whose one member, "m", scores it: ZADD GT
-- raises it in one call (scores hold integers below 2^53 exactly).
--
-- Writes first, reads only what the writes did not tell: the fence key is
-- created at the clock floor by SET NX GET, which returns its value when
-- it exists instead; and ZADD GT CH raises the mark to the fence and says
-- whether it stood below it. Only a new key whose mark did not (the mark
-- ahead of the clock) reads the mark and takes mark + 1. A grant on a new
-- name so costs TIME, SET NX GET and ZADD; on a name whose key exists TIME,
-- SET NX GET, SET KEEPTTL, PEXPIRE GT and ZADD (TestMutexFastPathCommands;
-- until 2026-12 a new name cost GET, ZSCORE, TIME, SET and ZADD).
local function issue(fk, mk, ttl, rho, floor)
  local phi = now() * 1000
  local c = redis.pcall('SET', fk, dec(phi), 'NX', 'PX', dec(ttl + rho), 'GET')
  if type(c) == 'table' then
    -- Before Redis 7.0 SET cannot combine NX with GET; a key of another
    -- type fails here too, and the GET raises its error.
    c = redis.call('GET', fk)
    if not c then
      redis.call('SET', fk, dec(phi), 'PX', dec(ttl + rho))
    end
  end
  local f = phi
  if c then
    local last = tonumber(c)
    if not last or last ~= math.floor(last) then
      error({err = 'ERR dlock: fence key ' .. fk .. ' holds no integer'})
    end
    f = math.max(last + 1, phi)
  end
  if floor and floor > f and floor <= phi + 100000 then
    f = floor
  end
  local up = redis.pcall('ZADD', mk, 'GT', 'CH', f, 'm')
  if type(up) == 'table' then
    -- A mark of another type: a key created just now must not stand
    -- without the mark's word.
    if not c then
      redis.call('DEL', fk)
    end
    error(up)
  end
  if up == 0 and not c then
    -- The mark stood at or above the fence: the new key starts above it.
    local m = tonumber(redis.call('ZSCORE', mk, 'm'))
    if m and m >= f then
      f = m + 1
      redis.call('ZADD', mk, 'GT', f, 'm')
    end
  end
  if c then
    redis.call('SET', fk, dec(f), 'KEEPTTL')
    keep(fk, ttl, rho)
  elseif f ~= phi then
    redis.call('SET', fk, dec(f), 'PX', dec(ttl + rho))
  end
  return f
end

-- raise makes fence key fk and mark mk at least f, for a hold that ends
-- left ms from now (Redlock's write-back), keeping fk rho ms past it.
local function raise(fk, mk, f, left, rho)
  local c = redis.call('GET', fk)
  if not c then
    redis.call('SET', fk, dec(f), 'PX', dec(math.max(left, 0) + rho))
    redis.call('ZADD', mk, 'GT', f, 'm')
    return
  end
  if f > (tonumber(c) or 0) then
    redis.call('SET', fk, dec(f), 'KEEPTTL')
  end
  keep(fk, math.max(left, 0), rho)
  redis.call('ZADD', mk, 'GT', f, 'm')
end

-- fence issues the name's next fence for a pattern's grant of TTL ttl ms,
-- taking the floor store/redlock proposed in ARGV[8], if any.
local function fence(ttl)
  return issue(KEYS[2], KEYS[#KEYS], ttl, tonumber(ARGV[7]), tonumber(ARGV[8]))
end

-- keep_fence keeps the name's fence key for a pattern's hold that now ends
-- ttl ms from now.
local function keep_fence(ttl)
  keep(KEYS[2], ttl, tonumber(ARGV[7]))
end

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
-- KEYS[6]  the fence mark of the lock's hash slot (see clock_lib); the last
--          key in either form
-- ARGV[1]  token
-- ARGV[2]  TTL in milliseconds
-- ARGV[3]  fence retention in ms: the fence key is kept this long past
--          the hold's TTL
-- ARGV[4]  unused (a hint of the versions before 2026-11); any value
-- ARGV[5]  optional: a proposed fence floor (redisproto.WithFenceFloor), or
--          "" for none
-- ARGV[6]  optional: "1" to register (or refresh) the caller as a waiter
--          when refused
-- ARGV[7]  with ARGV[6]: queue TTL in milliseconds: a registration not
--          refreshed by then is skipped, judged by this server's clock
--
-- A caller that does not queue may pass KEYS[1], KEYS[2] and the mark alone
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
if cur == me then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  local f = tonumber(redis.call('GET', KEYS[2]))
  if f then
    keep(KEYS[2], tonumber(ARGV[2]), tonumber(ARGV[3]))
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
local floor
if ARGV[5] and ARGV[5] ~= '' then
  floor = tonumber(ARGV[5])
end
local ok, f = pcall(issue, KEYS[2], KEYS[#KEYS], tonumber(ARGV[2]), tonumber(ARGV[3]), floor)
if not ok then
  -- The fence key is not an integer: undo a grant made just now, fail.
  if not cur then
    redis.call('DEL', KEYS[1])
  end
  if type(f) ~= 'table' then
    f = {err = tostring(f)}
  end
  return f
end
return f
