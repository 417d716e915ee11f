-- semaphore_lib: functions shared by the semaphore scripts, prepended to
-- each of semaphore_acquire, semaphore_release and semaphore_extend (the
-- store joins them into one script per operation). Every script of the
-- semaphore gets:
--
-- KEYS[1]  holders: sorted set, token -> lease expiry in server ms; one
--          member per permit
-- KEYS[2]  fence counter: the last fence issued for this lock name
-- KEYS[3]  meta: hash, "f:"..token -> the fence of each permit, "limit" ->
--          the limit of the last grant (for the Inspector)
-- KEYS[4]  gate: string that exists while every permit is taken, expiring
--          when the first permit's lease runs out; the key waiters watch
--          (CLIENT TRACKING). Deleted when a permit is released.
-- ARGV[1]  token
-- ARGV[2]  TTL in milliseconds
-- ARGV[3]  owner (unused)
-- ARGV[4]  limit: the number of permits, at least 1
-- ARGV[7]  fence retention in milliseconds (see fence)
local R, F, M, G = KEYS[1], KEYS[2], KEYS[3], KEYS[4]

local now_ms
local function now()
  if not now_ms then
    local t = redis.call('TIME')
    now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end
  return now_ms
end

-- fence issues max(last + 1, server time in ms * 1000), and keeps the
-- counter for max(ARGV[7], TTL + 1 min): ARGV[7] is the fence retention in
-- milliseconds.
local function fence()
  local f = math.max((tonumber(redis.call('GET', F)) or 0) + 1, now() * 1000)
  local keep = math.max(tonumber(ARGV[7]), tonumber(ARGV[2]) + 60000)
  redis.call('SET', F, string.format('%.0f', f), 'PX', string.format('%.0f', keep))
  return f
end

local function drop(tok)
  redis.call('ZREM', R, tok)
  redis.call('HDEL', M, 'f:' .. tok)
end

-- prune drops the permits whose lease ran out.
local function prune()
  for _, tok in ipairs(redis.call('ZRANGEBYSCORE', R, '-inf', now())) do
    drop(tok)
  end
end

-- soonest is the remaining time of the first permit to run out, in ms.
local function soonest()
  local first = redis.call('ZRANGE', R, 0, 0, 'WITHSCORES')
  if #first == 0 then
    return 0
  end
  return math.max(tonumber(first[2]) - now(), 1)
end

-- ensure makes key live at least ms more.
local function ensure(key, ms)
  if redis.call('PTTL', key) < ms then
    redis.call('PEXPIRE', key, ms)
  end
end
