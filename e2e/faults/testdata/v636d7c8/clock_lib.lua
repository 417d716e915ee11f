-- clock_lib: the server clock and the fences, prepended to every script
-- that issues, keeps or raises fences. The patterns' scripts (read-write,
-- fair, semaphore, reentrant, election) call fence, keep_fence and
-- raise_fence, for which KEYS[2] is the lock name's fence key, the last key
-- (KEYS[#KEYS], after the main key) its slot's fence mark, and ARGV[7] the
-- fence retention in milliseconds; the mutex and multi-lock scripts call
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
-- A grant that finds the fence key issues its value + 1; one that does not
-- issues max(mark + 1, clock floor), the clock floor being server time in
-- ms * 1000. Either sets the fence key and raises the mark. A version of
-- dlock before 2026-11 keeps only the fence key (then a counter kept a
-- day): its grants INCR the key when it exists and start it at the clock
-- floor otherwise, so a fleet mixing the two issues increasing fences on a
-- name (docs/safety.md states the bound on clock steps this takes).

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

-- issue issues the next fence of the name whose fence key is fk and whose
-- slot's mark is mk, for a grant of ttl ms kept rho ms after its TTL.
-- floor, if any, is a floor proposed by store/redlock: taken when the key
-- is absent and it is above the fence by at most 100 ms of this node's
-- clock floor (so that nodes of one grant issue the same fence). A fence
-- key that holds anything but an integer raises an error, writing nothing.
--
-- The mark is a sorted set whose one member, "m", scores it: ZADD GT
-- raises it in one call, without reading it (scores hold integers below
-- 2^53 exactly). A name whose key exists costs INCR (which keeps the
-- key's expiry), PEXPIRE and ZADD; one without it INCR, ZSCORE, TIME, SET
-- and ZADD.
local function issue(fk, mk, ttl, rho, floor)
  local f = redis.pcall('INCR', fk)
  if type(f) == 'table' then
    error(f)
  end
  local px = dec(ttl + rho)
  if f < 1e15 then
    -- INCR created the key (or found a number below any fence, set by
    -- hand): issue from the mark and the clock.
    local m = tonumber(redis.call('ZSCORE', mk, 'm')) or 0
    local phi = now() * 1000
    f = math.max(m + 1, phi)
    if floor and floor > f and floor <= phi + 100000 then
      f = floor
    end
    redis.call('SET', fk, dec(f), 'PX', px)
  else
    redis.call('PEXPIRE', fk, px)
  end
  redis.call('ZADD', mk, 'GT', f, 'm')
  return f
end

-- keep makes fence key fk outlive a hold that now ends ttl ms from now by
-- rho ms (a key that is gone stays gone).
local function keep(fk, ttl, rho)
  local left = redis.call('PTTL', fk)
  if left ~= -2 and left < ttl + rho then
    redis.call('PEXPIRE', fk, dec(ttl + rho))
  end
end

-- raise makes fence key fk and mark mk at least f, for a hold that ends
-- left ms from now (Redlock's write-back), keeping fk rho ms past it.
local function raise(fk, mk, f, left, rho)
  if f > (tonumber(redis.call('GET', fk)) or 0) then
    redis.call('SET', fk, dec(f), 'PX', dec(math.max(left, 0) + rho))
  else
    keep(fk, math.max(left, 0), rho)
  end
  redis.call('ZADD', mk, 'GT', f, 'm')
end

-- fence issues the name's next fence for a pattern's grant of TTL ttl ms.
local function fence(ttl)
  return issue(KEYS[2], KEYS[#KEYS], ttl, tonumber(ARGV[7]))
end

-- keep_fence keeps the name's fence key for a pattern's hold that now ends
-- ttl ms from now.
local function keep_fence(ttl)
  keep(KEYS[2], ttl, tonumber(ARGV[7]))
end
