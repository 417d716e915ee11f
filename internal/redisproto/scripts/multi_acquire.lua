-- multi_acquire: take the plain mutex keys of N names for one token, all or
-- none (dlock.Multi when every name is on one node or in one cluster slot).
-- Each name is held exactly as mutex_acquire holds it: its key holds the
-- token, and its fence is issued from its fence key and its slot's mark.
--
-- KEYS[6i-5]  lock key of name i (i = 1..N)
-- KEYS[6i-4]  fence key of name i
-- KEYS[6i-3]  waiters of name i (unused; see mutex_acquire)
-- KEYS[6i-2]  waiters flag of name i (see mutex_acquire): set with a record,
--             so that every release of the name reads it
-- KEYS[6i-1]  the hold's record of name i (see hold_lib)
-- KEYS[6i]    the fence mark of name i's hash slot (see clock_lib)
-- ARGV[1]     token
-- ARGV[2]     fence retention in milliseconds (see mutex_acquire)
-- ARGV[2+i]   TTL in milliseconds of name i
-- ARGV[3+N..6+N] optional: the request's record (see hold_lib), kept for
--             each name as mutex_acquire keeps it; the TTLs are then at
--             most its max hold
--
-- Reply: {1, fence_1, ..., fence_N} when ARGV[1] holds every name after the
-- call; a repeat by the holder refreshes the TTLs (capped at each record's
-- max end) and returns the fences it was granted with. {0, i, pttl, held}
-- when name i is held by another token or pattern (pttl -1: the key has no
-- TTL; otherwise at least 1; held the dlock.Mode number, as mutex_acquire
-- reports it): nothing was granted, and names the token held from an
-- earlier call were given up, so that a refused call leaves nothing held.
--
-- Every key and fence key is read before anything is written, so a key of
-- the wrong type, or a fence key that holds no integer, fails the call
-- before any grant.
hold_lib()
local me = ARGV[1]
local n = #KEYS / 6
local mine, last = {}, {}
local refused
for i = 1, n do
  local cur = redis.call('GET', KEYS[6 * i - 5])
  if cur == me then
    mine[i] = true
  elseif cur and not refused then
    refused = i
  end
  local raw = redis.call('GET', KEYS[6 * i - 4])
  last[i] = tonumber(raw)
  if raw and not last[i] then
    return redis.error_reply('ERR dlock: fence key ' .. KEYS[6 * i - 4] .. ' holds no integer')
  end
end
if refused then
  for i = 1, n do
    if mine[i] then
      redis.call('DEL', KEYS[6 * i - 5])
    end
  end
  local key = KEYS[6 * refused - 5]
  local left = redis.call('PTTL', key)
  if left == 0 then
    left = 1
  end
  local held = 0
  local m = string.match(redis.call('GET', key), '^dlock:(%a+)')
  if m then
    held = ({reentrant = 1, read = 2, write = 3, fair = 4, semaphore = 5, election = 6})[m] or 0
  end
  return {0, refused, left, held}
end
local wanted = rec_wanted(3 + n)
local reply = {1}
for i = 1, n do
  local ttl = tonumber(ARGV[2 + i])
  local flag, hold = KEYS[6 * i - 2], KEYS[6 * i - 1]
  if mine[i] and last[i] then
    -- A repeat by the holder: refresh, same fence.
    local r = rec_parse(redis.call('GET', hold))
    if r and r.tok == me then
      ttl = math.max(rec_ttl(r, ttl), 1)
      redis.call('PEXPIRE', hold, ttl)
      keep(flag, ttl, 0)
    end
    redis.call('PEXPIRE', KEYS[6 * i - 5], ttl)
    keep(KEYS[6 * i - 4], ttl, tonumber(ARGV[2]))
    reply[i + 1] = last[i]
  else
    redis.call('SET', KEYS[6 * i - 5], me, 'PX', ttl)
    -- The fence as in mutex_acquire.
    local f = issue_or_fail(KEYS[6 * i - 4], KEYS[6 * i], ttl, tonumber(ARGV[2]))
    reply[i + 1] = f
    if wanted then
      redis.call('SET', hold, rec_new(me, f, rec_argv(3 + n)), 'PX', ttl)
      if not redis.call('SET', flag, 'r', 'NX', 'PX', ttl) then
        keep(flag, ttl, 0)
      end
    end
  end
end
return reply
