-- mutex_release_record: the mutex release of a hold that the caller's
-- store granted with a record (see hold_lib) on a name it has seen no
-- waiters on: compare-and-delete of the lock key, the record and the
-- waiters flag, when the flag says "a record and no waiter" ("r") and the
-- record is the caller's, not kept by a min hold; otherwise the full form
-- (mutex_release) decides.
--
-- KEYS[1]  lock key
-- KEYS[2]  waiters flag (see mutex_acquire)
-- KEYS[3]  the hold's record (see hold_lib)
-- ARGV[1]  token
--
-- Reply: 1 when ARGV[1] held the lock (now released, its record and flag
-- deleted); without a flag, as mutex_release_short (a later hold of the
-- name without a record), 1 or 0 (not held, nothing changed); -1 when the
-- full form must decide (waiters, another holder, no record of the
-- caller's, or a min hold to keep), nothing changed.
--
-- A script of its own, without clock_lib and hold_lib, as
-- mutex_release_short is: two calls (MGET, DEL), three with a min hold
-- whose end passed (TIME).
local v = redis.call('MGET', KEYS[1], KEYS[2], KEYS[3])
if not v[2] then
  if v[1] ~= ARGV[1] then
    return 0
  end
  redis.call('DEL', KEYS[1])
  return 1
end
if v[1] ~= ARGV[1] or v[2] ~= 'r' or not v[3] then
  return -1
end
local mn, st, tl, rest = string.match(v[3], '^%d+ (%d+) %d+ %d+ (%d) (%d+) %d+ (.*)$')
if not mn or st ~= '0' or string.sub(rest, 1, tonumber(tl)) ~= ARGV[1] then
  return -1
end
if mn ~= '0' then
  local t = redis.call('TIME')
  if tonumber(mn) > tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) then
    return -1
  end
end
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3])
return 1
