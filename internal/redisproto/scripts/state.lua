-- state: describe one lock for the Inspector, without revealing tokens.
--
-- KEYS[1]  lock key
-- KEYS[2]  fence key
-- KEYS[3]  the mutex's registered waiters (see mutex_acquire)
-- KEYS[4]  the hold's record (see hold_lib)
--
-- Reply: {type, holders, pttl, fence, waiters, [holder, since, data,
-- hold fence]}: the last four describe a mutex's holder from its record
-- (one naming another token, a stale one, is not shown: "", 0, "" and the
-- last fence). type is the Redis type of
-- the lock key ("none" when free, "pattern" when it holds the marker of a
-- pattern other than the mutex); holders counts its holders by type (a
-- string is one holder, a hash/set/sorted set has one per field/member);
-- pttl is the lock key's remaining TTL in ms (-2 none, -1 no TTL); fence is
-- the last fence issued (0 when the counter is gone); waiters counts the
-- live registrations of mutex waiters (0 unless type is "string").
hold_lib()
local t = redis.call('TYPE', KEYS[1])['ok']
local holders, waiters = 0, 0
if t == 'string' and string.match(redis.call('GET', KEYS[1]), '^dlock:%a') then
  -- Another pattern's marker (see name_lib): its own keys tell the state.
  t = 'pattern'
end
if t == 'string' then
  holders = 1
  local now = redis.call('TIME')
  waiters = redis.call('ZCOUNT', KEYS[3], '(' .. (tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)), '+inf')
elseif t == 'hash' then
  holders = redis.call('HLEN', KEYS[1])
elseif t == 'set' then
  holders = redis.call('SCARD', KEYS[1])
elseif t == 'zset' then
  holders = redis.call('ZCARD', KEYS[1])
end
local fence = tonumber(redis.call('GET', KEYS[2])) or 0
local reply = {t, holders, redis.call('PTTL', KEYS[1]), fence, waiters}
if t == 'string' then
  local r = rec_parse(redis.call('GET', KEYS[4]))
  if r and r.tok ~= redis.call('GET', KEYS[1]) then
    r = nil
  end
  local o = rec_owner(r, fence)
  -- A held mutex's fence is the counter's: a RaiseFence (store/redlock's
  -- write-back) raises both above the fence the record was issued with.
  if fence > 0 then
    o[4] = fence
  end
  for _, x in ipairs(o) do
    reply[#reply + 1] = x
  end
end
return reply
