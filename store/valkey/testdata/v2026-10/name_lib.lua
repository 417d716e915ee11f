-- name_lib: a name is one lock. Prepended (after clock_lib) to every script
-- of the reentrant, read-write, fair, semaphore and election locks, whose last key is
-- the lock's main key, "lock:<name>": the plain mutex's key. While one of
-- these patterns holds the name, the main key holds its marker,
-- "dlock:<mode>" ("dlock:semaphore:<limit>" for permits), expiring with
-- the pattern's longest hold, so that the mutex, the other patterns and
-- foreign libraries' SET NX see the hold. Any other value there (a mutex
-- holder's token, a foreign library's token, another pattern's marker)
-- refuses the pattern's requests, the refreshes of its own holders (a
-- repeated acquire, an extend) included: a hold whose main key another
-- holder took (a DEL, then a foreign SET NX) has lost the name, and its
-- refresh replies as refused by that holder or not held, changing nothing.
-- Markers start with "dlock:", which no token does (the library and the
-- Redis stores refuse such tokens), so a marker is never a holder's token.
local MAIN = KEYS[#KEYS]
local MODE_OF = {reentrant = 1, read = 2, write = 3, fair = 4, semaphore = 5, election = 6}

-- blocker returns the dlock.Mode number of the hold in the main key (0 for
-- a token: a mutex or a foreign library) and its remaining ms (at least 1;
-- -1 when it has no expiry), or nil when the key is free or own(value)
-- says it is this pattern's marker.
local function blocker(own)
  local v = redis.call('GET', MAIN)
  if not v or own(v) then
    return nil
  end
  local left = redis.call('PTTL', MAIN)
  if left == 0 then
    left = 1
  end
  return MODE_OF[string.match(v, '^dlock:(%a+)') or ''] or 0, left
end

-- mark makes the main key hold marker for ms more by the server's clock,
-- or, when ms is 0, deletes it; either only when the key is free or
-- own(its value). It never writes over, extends or deletes another holder's
-- value: a refresh of a hold whose main key another holder took (a DEL and a
-- foreign SET NX) must fail instead (see blocker), and a release that leaves
-- holders behind keeps the other holder's key.
local function mark(marker, ms, own)
  local v = redis.call('GET', MAIN)
  if v and not own(v) then
    return
  end
  if ms > 0 then
    redis.call('SET', MAIN, marker, 'PXAT', string.format('%.0f', now() + ms))
  elseif v then
    redis.call('DEL', MAIN)
  end
end
