-- fair_acquire: take the fair lock, or join (or refresh a place in) its
-- queue. KEYS and ARGV: see fair_lib.
--
-- Reply: {1, fence, 0, 1, 0} when ARGV[1] holds the lock after the call (a
-- repeat by the holder, or by a waiter it was handed to, refreshes the TTL
-- and returns the fence of the grant); {0, 0, pttl, 0, position, held} when
-- refused: pttl is the holder's remaining TTL, position the caller's place
-- in the queue (0 is next), or the queue length when it did not queue, held
-- the mode holding the name (4, or another holder's of the main key: see
-- name_lib). A repeat by the holder while another holder of the main key
-- has the name is refused, {0, 0, pttl, 0, 0, held}, and changes nothing.
--
-- Dead waiters are dropped first, and a lock that is free (its holder's
-- lease ran out) goes to the head waiter before the caller is considered,
-- so nobody overtakes the queue.
local me, ttl = ARGV[1], tonumber(ARGV[2])
prune()
local tok, f = holder()
if not tok then
  tok, f = promote()
end
if tok == me then
  local held, left = blocker(own)
  if held then
    return {0, 0, left, 0, 0, held}
  end
  local r = record(me)
  if r then
    if r.released then
      return {0, 0, math.max(redis.call('PTTL', H), 1), 0, 0, 4}
    end
    ttl = math.max(rec_ttl(r, ttl), 1)
    redis.call('PEXPIRE', REC, ttl)
  end
  redis.call('PEXPIRE', H, ttl)
  mark('dlock:fair', ttl, own)
  keep_fence(ttl)
  return {1, f, 0, 1, 0}
end
local held, left
if not tok then
  held, left = blocker(own)
  if not held then
    -- Free, and (after promote) nobody queued.
    local f = grant(me, ttl)
    if rec_wanted(9) then
      redis.call('SET', REC, rec_new(me, f, rec_argv(9)), 'PX', ttl)
    end
    return {1, f, 0, 1, 0}
  end
end
local pos
if ARGV[5] == '1' then
  local qttl = tonumber(ARGV[6])
  -- A ticket is drawn on every call; NX keeps the first one (gaps between
  -- tickets are harmless).
  redis.call('ZADD', Q, 'NX', redis.call('HINCRBY', W, 'seq', 1), me)
  redis.call('ZADD', QX, now() + qttl, me)
  redis.call('HSET', W, 't:' .. me, ARGV[2] .. ' ' .. KEYS[7])
  if rec_wanted(9) then
    redis.call('HSET', W, 'r:' .. me, ARGV[9] .. ' ' .. ARGV[10] .. ' ' .. #ARGV[11] .. ' ' .. ARGV[11] .. ARGV[12])
  end
  -- The queue's keys outlive every live entry: their TTL, set to the queue
  -- TTL plus a minute, is topped up once it falls below plus half a minute.
  if redis.call('PTTL', Q) < qttl + 30000 then
    for _, k in ipairs({Q, QX, W}) do
      redis.call('PEXPIRE', k, qttl + 60000)
    end
  end
  pos = redis.call('ZRANK', Q, me)
else
  pos = redis.call('ZRANK', Q, me) or redis.call('ZCARD', Q)
end
if held then
  return {0, 0, left, 0, pos, held}
end
return {0, 0, redis.call('PTTL', H), 0, pos, 4}
