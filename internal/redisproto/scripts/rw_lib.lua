-- rw_lib: functions shared by the read-write lock scripts, prepended to
-- each of rw_read_acquire, rw_write_acquire, rw_release and rw_extend (the
-- store joins them into one script per operation). Every script of the
-- read-write lock gets:
--
-- KEYS[1]  holders: sorted set, token -> lease expiry in server ms; every
--          reader and the writer is its own member with its own expiry
-- KEYS[2]  fence key: the last fence issued for this lock name (clock_lib)
-- KEYS[3]  meta: hash, "w" -> the writer's token, "f:"..token -> the fence
--          of each holder's grant, "seq" -> last writer ticket issued
-- KEYS[4]  writer intents: sorted set, token -> ticket (arrival order)
-- KEYS[5]  intent deadlines: sorted set, token -> expiry in server ms
-- KEYS[6]  gate: string that exists while anyone holds the lock, expiring
--          with the longest hold; the key waiters watch (CLIENT TRACKING).
--          Scripts write it when waiters may get in: deleted when the last
--          holder leaves, rewritten when a writer leaves readers behind or a
--          writer intent is withdrawn.
-- KEYS[7]  the holds' records (see hold_lib): hash, token -> record,
--          an entry dropped with its holder
-- KEYS[8]  main key "lock:<name>": "dlock:write" while a writer holds,
--          "dlock:read" while only readers do (see name_lib)
-- KEYS[9]  the fence mark of the lock's hash slot (see clock_lib)
-- ARGV[1]  token
-- ARGV[2]  TTL in milliseconds
-- ARGV[3]  owner: for a reader, the token of the writer it enters beside
--          (a downgrade); for a writer, a token whose read hold makes this an
--          upgrade, refused. Equal to ARGV[1] when not given.
-- ARGV[4]  limit (unused)
-- ARGV[5]  queue: "1" for a writer that waits, leaving an intent
-- ARGV[6]  queue TTL in milliseconds: an intent not refreshed by then is
--          dropped, judged by this server's clock
-- ARGV[7]  fence retention in milliseconds (see clock_lib)
-- ARGV[8]  optional: a proposed fence floor (see clock_lib), or ""
-- ARGV[9..12] optional: the request's record (see hold_lib), written with
--          a new grant; ARGV[2] is then at most its max hold, and every
--          refresh is capped at the record's max end
local R, F, M, Q, QX, G, HS = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7]

local function drop(tok)
  redis.call('ZREM', R, tok)
  redis.call('HDEL', M, 'f:' .. tok)
  redis.call('HDEL', HS, tok)
  if redis.call('HGET', M, 'w') == tok then
    redis.call('HDEL', M, 'w')
  end
end

local function unqueue(tok)
  redis.call('ZREM', Q, tok)
  redis.call('ZREM', QX, tok)
end

-- prune drops holders whose lease ran out and intents that were not
-- refreshed in time.
local function prune()
  for _, tok in ipairs(redis.call('ZRANGEBYSCORE', R, '-inf', now())) do
    drop(tok)
  end
  for _, tok in ipairs(redis.call('ZRANGEBYSCORE', QX, '-inf', now())) do
    unqueue(tok)
  end
end

-- longest is the remaining time of the longest hold in ms (0: none).
local function longest()
  local last = redis.call('ZRANGE', R, -1, -1, 'WITHSCORES')
  if #last == 0 then
    return 0
  end
  return math.max(tonumber(last[2]) - now(), 0)
end

-- ensure makes key live at least ms more.
local function ensure(key, ms)
  if redis.call('PTTL', key) < ms then
    redis.call('PEXPIRE', key, ms)
  end
end

-- hold makes tok a holder for ttl ms with fence f.
local function hold(tok, ttl, f)
  redis.call('ZADD', R, now() + ttl, tok)
  redis.call('HSET', M, 'f:' .. tok, string.format('%.0f', f))
  if redis.call('PTTL', G) < ttl then
    redis.call('SET', G, '1', 'PX', ttl)
  end
  ensure(R, ttl + 60000)
  ensure(M, ttl + 60000)
end

-- record makes tok's record, when the request carries one, for a grant
-- with fence f and TTL ttl.
local function record(tok, f, ttl)
  if rec_wanted(9) then
    redis.call('HSET', HS, tok, rec_new(tok, f, rec_argv(9)))
    ensure(HS, ttl + 60000)
  end
end

-- refresh renews the hold of tok, capped at its record's max end,
-- returning its fence and the TTL set, or nil when tok holds nothing (or
-- its max end passed).
local function refresh(tok, ttl)
  local exp = redis.call('ZSCORE', R, tok)
  if not exp or tonumber(exp) <= now() then
    return nil
  end
  local r = rec_parse(redis.call('HGET', HS, tok))
  if r then
    ttl = rec_ttl(r, ttl)
    if ttl <= 0 then
      return nil
    end
    ensure(HS, ttl + 60000)
  end
  local f = tonumber(redis.call('HGET', M, 'f:' .. tok))
  hold(tok, ttl, f)
  keep_fence(ttl)
  return f, ttl, rec_left(r)
end

local function own(v)
  return v == 'dlock:read' or v == 'dlock:write'
end

-- sync makes the main key tell the current holders: the write or read
-- marker until the longest hold ends, or nothing.
local function sync()
  local ms = longest()
  local marker = 'dlock:read'
  if ms > 0 then
    local w = redis.call('HGET', M, 'w')
    if w and redis.call('ZSCORE', R, w) then
      marker = 'dlock:write'
    end
  end
  mark(marker, ms, own)
end

-- enqueue keeps (or takes) the caller's place as a waiting writer and
-- returns its position.
local function enqueue(me)
  local qttl = tonumber(ARGV[6])
  if not redis.call('ZSCORE', Q, me) then
    redis.call('ZADD', Q, redis.call('HINCRBY', M, 'seq', 1), me)
  end
  redis.call('ZADD', QX, now() + qttl, me)
  ensure(Q, qttl + 60000)
  ensure(QX, qttl + 60000)
  ensure(M, qttl + 60000)
  return redis.call('ZRANK', Q, me)
end
