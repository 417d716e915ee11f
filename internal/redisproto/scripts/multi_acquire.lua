-- multi_acquire: take the plain mutex keys of N names for one token, all or
-- none (dlock.Multi when every name is on one node or in one cluster slot).
-- Each name is held exactly as mutex_acquire holds it: its key holds the
-- token, and its fence is issued from its fence key and its slot's mark.
--
-- KEYS[3i-2]  lock key of name i (i = 1..N)
-- KEYS[3i-1]  fence key of name i
-- KEYS[3i]    the fence mark of name i's hash slot (see clock_lib)
-- ARGV[1]     token
-- ARGV[2]     fence retention in milliseconds (see mutex_acquire)
-- ARGV[2+i]   TTL in milliseconds of name i
--
-- Reply: {1, fence_1, ..., fence_N} when ARGV[1] holds every name after the
-- call; a repeat by the holder refreshes the TTLs and returns the fences it
-- was granted with. {0, i, pttl, held} when name i is held by another token
-- or pattern (pttl -1: the key has no TTL; otherwise at least 1; held the
-- dlock.Mode number, as mutex_acquire reports it): nothing was granted,
-- and names the token held from an earlier call were given up, so that a
-- refused call leaves nothing held.
--
-- Every key and fence key is read before anything is written, so a key of
-- the wrong type, or a fence key that holds no integer, fails the call
-- before any grant.
local me = ARGV[1]
local n = #KEYS / 3
local mine, last = {}, {}
local refused
for i = 1, n do
  local cur = redis.call('GET', KEYS[3 * i - 2])
  if cur == me then
    mine[i] = true
  elseif cur and not refused then
    refused = i
  end
  local raw = redis.call('GET', KEYS[3 * i - 1])
  last[i] = tonumber(raw)
  if raw and not last[i] then
    return redis.error_reply('ERR dlock: fence key ' .. KEYS[3 * i - 1] .. ' holds no integer')
  end
end
if refused then
  for i = 1, n do
    if mine[i] then
      redis.call('DEL', KEYS[3 * i - 2])
    end
  end
  local key = KEYS[3 * refused - 2]
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
local reply = {1}
for i = 1, n do
  local ttl = ARGV[2 + i]
  if mine[i] and last[i] then
    -- A repeat by the holder: refresh, same fence.
    redis.call('PEXPIRE', KEYS[3 * i - 2], ttl)
    keep(KEYS[3 * i - 1], tonumber(ttl), tonumber(ARGV[2]))
    reply[i + 1] = last[i]
  else
    redis.call('SET', KEYS[3 * i - 2], me, 'PX', ttl)
    -- The fence as in mutex_acquire.
    local f = issue(KEYS[3 * i - 1], KEYS[3 * i], tonumber(ttl), tonumber(ARGV[2]))
    reply[i + 1] = f
  end
end
return reply
