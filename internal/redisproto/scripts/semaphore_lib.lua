-- semaphore_lib: functions shared by the semaphore scripts, prepended to
-- each of semaphore_acquire, semaphore_release and semaphore_extend (the
-- store joins them into one script per operation). Every script of the
-- semaphore gets:
--
-- KEYS[1]  holders: sorted set, token -> lease expiry in server ms; one
--          member per permit
-- KEYS[2]  fence key: the last fence issued for this lock name (clock_lib)
-- KEYS[3]  meta: hash, "f:"..token -> the fence of each permit, "limit" ->
--          the limit of the last grant (for the Inspector)
-- KEYS[4]  gate: string that exists while every permit is taken, expiring
--          when the first permit's lease runs out; the key waiters watch
--          (CLIENT TRACKING). Deleted when a permit is released.
-- KEYS[5]  the permits' records (see hold_lib): hash, token -> record,
--          an entry dropped with its permit
-- KEYS[6]  main key "lock:<name>": "dlock:semaphore:<limit>" while any
--          permit is held (see name_lib)
-- KEYS[7]  the fence mark of the lock's hash slot (see clock_lib)
-- ARGV[1]  token
-- ARGV[2]  TTL in milliseconds
-- ARGV[3]  owner (unused)
-- ARGV[4]  limit: the number of permits, at least 1
-- ARGV[7]  fence retention in milliseconds (see clock_lib)
-- ARGV[8]  optional: a proposed fence floor (see clock_lib), or ""
-- ARGV[9..12] optional: the request's record (see hold_lib), written with
--          a new permit; ARGV[2] is then at most its max hold, and every
--          renewal is capped at the record's max end
local R, F, M, G, HS = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]

local function drop(tok)
  redis.call('ZREM', R, tok)
  redis.call('HDEL', M, 'f:' .. tok)
  redis.call('HDEL', HS, tok)
end

-- capped returns ttl capped at tok's record's max end, and the record's
-- max hold left, keeping the records while the permit lives.
local function capped(tok, ttl)
  local r = rec_parse(redis.call('HGET', HS, tok))
  if not r then
    return ttl, 0
  end
  ttl = rec_ttl(r, ttl)
  if ttl > 0 and redis.call('PTTL', HS) < ttl + 60000 then
    redis.call('PEXPIRE', HS, ttl + 60000)
  end
  return ttl, rec_left(r)
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

-- longest is the remaining time of the last permit to run out, in ms (0:
-- none).
local function longest()
  local last = redis.call('ZRANGE', R, -1, -1, 'WITHSCORES')
  if #last == 0 then
    return 0
  end
  return math.max(tonumber(last[2]) - now(), 0)
end

local function own(v)
  return string.sub(v, 1, 16) == 'dlock:semaphore:'
end

-- sync makes the main key tell the permits held, with their limit.
local function sync()
  local limit = redis.call('HGET', M, 'limit') or ARGV[4]
  mark('dlock:semaphore:' .. limit, longest(), own)
end
