-- rw_write_acquire: take the write side of the read-write lock. KEYS and
-- ARGV: see rw_lib.
--
-- Reply: {1, fence, 0} when ARGV[1] holds the write lease after the call (a
-- repeat refreshes its TTL and returns the same fence; a new grant issues a
-- new fence). {0, 0, retry_ms, 0, position, held} while anyone holds the
-- lock (held: 3 a writer, 2 readers) or an earlier writer waits (held 3), or
-- another holder of the main key has the name (see name_lib); with ARGV[5]
-- = "1" the caller keeps (or takes) its place, which keeps new readers out
-- until it has had its turn. A repeat by the writer while another holder
-- of the main key has the name is refused and changes nothing.
-- {-1, 0, 0} when ARGV[3], or ARGV[1] itself, is the token of a reader
-- holding the lock: an upgrade, which would wait for itself (and, for a
-- reader's own token, would otherwise pass for the repeat of a write).
local me, ttl, owner = ARGV[1], tonumber(ARGV[2]), ARGV[3]
prune()
local held, left = blocker(own)
if held and redis.call('ZSCORE', R, me) then
  return {0, 0, left, 0, 0, held}
end
if redis.call('ZSCORE', R, me) and redis.call('HGET', M, 'w') ~= me then
  return {-1, 0, 0} -- a reader's own token: an upgrade, not a repeat
end
local f = refresh(me, ttl) -- nil while held: the caller is no holder
if f then
  sync()
  return {1, f, 0}
end
if owner ~= me and redis.call('ZSCORE', R, owner) and redis.call('HGET', M, 'w') ~= owner then
  return {-1, 0, 0}
end
if held then
  local pos = 0
  if ARGV[5] == '1' then
    pos = enqueue(me)
  end
  return {0, 0, left, 0, pos, held}
end
local head = redis.call('ZRANGE', Q, 0, 0)[1]
if redis.call('ZCARD', R) > 0 or (head and head ~= me) then
  local pos
  if ARGV[5] == '1' then
    pos = enqueue(me)
  else
    pos = redis.call('ZRANK', Q, me) or redis.call('ZCARD', Q)
  end
  held = 3
  local w = redis.call('HGET', M, 'w')
  if redis.call('ZCARD', R) > 0 and not (w and redis.call('ZSCORE', R, w)) then
    held = 2
  end
  return {0, 0, longest(), 0, pos, held}
end
unqueue(me)
f = fence(ttl)
redis.call('HSET', M, 'w', me)
hold(me, ttl, f)
record(me, f, ttl)
sync()
return {1, f, 0}
