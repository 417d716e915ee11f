-- clock_lib: the server clock and the fences, prepended to every script
-- that issues or keeps fences; fence_lib (raise, and the patterns' fence and
-- keep_fence) follows it in every script but the mutex's fast-path acquire,
-- which needs only issue (each function a script defines is made anew on
-- every call: raise, fence and keep_fence cost that acquire 2.4 % of its
-- server instructions, BenchmarkServerInstructions).
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

-- phi is the clock floor, the server's time in milliseconds × 1000, as a
-- decimal string made from TIME's reply without arithmetic, and now_ms the
-- time in milliseconds, each made the first time a script needs it from
-- one read of TIME: a grant on a new name makes only phi (string.format
-- and tonumber, which print and parse doubles, cost the server more than
-- the grant's TIME; BenchmarkServerInstructions).
local now_ms, phi

-- clock_floor returns phi.
local function clock_floor()
  if not phi then
    local t = redis.call('TIME')
    phi = t[1] .. string.sub('00000' .. t[2], -6, -4) .. '000'
  end
  return phi
end

-- now is the server's time in milliseconds.
local function now()
  if not now_ms then
    now_ms = tonumber(string.sub(clock_floor(), 1, -4))
  end
  return now_ms
end

local function dec(n) return string.format('%.0f', n) end

-- keep makes fence key fk outlive a hold that now ends ttl ms from now by
-- rho ms, never shortening it (a key that is gone stays gone, one without
-- an expiry keeps none). px, if given, is ttl + rho as a decimal string.
--
-- PEXPIRE GT does it in one call from Redis 7.0 on (GT leaves a key without
-- an expiry and a missing key alone); before, PTTL and PEXPIRE.
local function keep(fk, ttl, rho, px)
  px = px or dec(ttl + rho)
  local r = redis.pcall('PEXPIRE', fk, px, 'GT')
  if type(r) == 'table' and r.err then
    local left = redis.call('PTTL', fk)
    if left >= 0 and left < ttl + rho then
      redis.call('PEXPIRE', fk, px)
    end
  end
end

-- issue issues the next fence of the name whose fence key is fk and whose
-- slot's mark is mk, for a grant of ttl ms kept rho ms after its TTL (px,
-- if given, is ttl + rho as a decimal string, which the mutex's client
-- sends): max(last + 1, clock floor), last the fence key's value, or the
-- mark's when the key is absent. floor, if any, is a floor proposed by
-- store/redlock: taken when it is above that fence by at most 100 ms of
-- this node's clock floor (so that nodes of one grant issue the same
-- fence). It returns the fence; or nil and an error reply, having written
-- nothing, when the fence key holds anything but an integer or the mark is
-- of another type (a script that granted its hold before the call undoes
-- it, then returns the error; fence raises it).
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
-- until 2026-12 a new name cost GET, ZSCORE, TIME, SET and ZADD). On a new
-- name every number it sends is a string it was given or TIME's: a Lua
-- number sent to a command, or formatted, costs the server a printf of a
-- double (BenchmarkServerInstructions).
local function issue(fk, mk, ttl, rho, floor, px)
  local fs = clock_floor()
  local floor_n = tonumber(fs)
  px = px or dec(ttl + rho)
  local c = redis.pcall('SET', fk, fs, 'NX', 'PX', px, 'GET')
  if type(c) == 'table' then
    -- Before Redis 7.0 SET cannot combine NX with GET; a key of another
    -- type fails here too, and the GET returns its error.
    c = redis.pcall('GET', fk)
    if type(c) == 'table' then
      return nil, c
    end
    if not c then
      redis.call('SET', fk, fs, 'PX', px)
    end
  end
  local f = floor_n
  if c then
    local last = tonumber(c)
    if not last or last ~= math.floor(last) then
      return nil, {err = 'ERR dlock: fence key ' .. fk .. ' holds no integer'}
    end
    f = math.max(last + 1, floor_n)
  end
  if floor and floor > f and floor <= floor_n + 100000 then
    f = floor
  end
  if f ~= floor_n then
    fs = dec(f)
  end
  local up = redis.pcall('ZADD', mk, 'GT', 'CH', fs, 'm')
  if type(up) == 'table' then
    -- A mark of another type: a key created just now must not stand
    -- without the mark's word.
    if not c then
      redis.call('DEL', fk)
    end
    return nil, up
  end
  if up == 0 and not c then
    -- The mark stood at or above the fence: the new key starts above it.
    local m = tonumber(redis.call('ZSCORE', mk, 'm'))
    if m and m >= f then
      f = m + 1
      fs = dec(f)
      redis.call('ZADD', mk, 'GT', fs, 'm')
    end
  end
  if c then
    redis.call('SET', fk, fs, 'KEEPTTL')
    keep(fk, ttl, rho, px)
  elseif f ~= floor_n then
    redis.call('SET', fk, fs, 'PX', px)
  end
  return f
end
