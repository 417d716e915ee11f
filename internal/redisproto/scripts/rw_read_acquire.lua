-- rw_read_acquire: take the read side of the read-write lock. KEYS and
-- ARGV: see rw_lib.
--
-- Reply: {1, fence, 0} when ARGV[1] holds a read lease after the call (a
-- repeat refreshes its TTL and returns the same fence); fence is the
-- current one, that of the last write grant (a new one is issued only when
-- the counter is gone). {0, 0, retry_ms, 0, 0, held} while a writer holds
-- the lock (held 3) or waits for it (an intent; held 2), unless ARGV[3] is
-- the holding writer's token, or while another holder of the main key has
-- the name (see name_lib), a repeat included (nothing changed).
local me, ttl, owner = ARGV[1], tonumber(ARGV[2]), ARGV[3]
prune()
local held, left = blocker(own)
if held then
  return {0, 0, left, 0, 0, held}
end
local f = refresh(me, ttl)
if f then
  sync()
  return {1, f, 0}
end
local w = redis.call('HGET', M, 'w')
local beside = w and owner ~= me and owner == w
if not beside and (w or redis.call('ZCARD', Q) > 0) then
  local ra = longest()
  if ra == 0 then
    local first = redis.call('ZRANGE', QX, 0, 0, 'WITHSCORES')
    if #first > 0 then
      ra = math.max(tonumber(first[2]) - now(), 0)
    end
  end
  held = 2
  if w then
    held = 3
  end
  return {0, 0, ra, 0, 0, held}
end
f = tonumber(redis.call('GET', F))
if f then
  keep_fence(ttl)
else
  f = fence(ttl)
end
hold(me, ttl, f)
record(me, f, ttl)
sync()
return {1, f, 0}
