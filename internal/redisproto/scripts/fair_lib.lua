-- fair_lib: functions shared by the fair-lock scripts, prepended to each of
-- fair_acquire, fair_release and fair_extend (the store joins them into one
-- script per operation). Every script of the fair lock gets:
--
-- KEYS[1]  holder: string "<fence>|<token>" with the hold's TTL; absent
--          when free. The key waiters watch (CLIENT TRACKING).
-- KEYS[2]  fence key: the last fence issued for this lock name (clock_lib)
-- KEYS[3]  queue: sorted set, token -> ticket (arrival order)
-- KEYS[4]  queue deadlines: sorted set, token -> expiry in server ms
-- KEYS[5]  waiters: hash, "t:"..token -> "<lease TTL ms> <channel>": the
--          lease to grant on handoff and where to announce it (see
--          promote); "seq" -> last ticket issued
-- KEYS[6]  audit stream of grants and releases, capped at about 1000,
--          kept for a day after its last event
-- KEYS[7]  the caller's wake-up channel: a shard channel in this slot on
--          which the caller's store listens for the handoffs to its waiters
--          (a channel name, declared as a key so that it routes like one)
-- KEYS[8]  the hold's record (see hold_lib), expiring with the hold; a
--          waiter's record waits in KEYS[5], "r:"..token -> "<min hold ms>
--          <max hold ms> <#holder> <holder><data>", for its handoff
-- KEYS[9]  main key "lock:<name>": "dlock:fair" while the lock is held
--          (see name_lib)
-- KEYS[10] the fence mark of the lock's hash slot (see clock_lib)
-- ARGV[1]  token
-- ARGV[2]  TTL in milliseconds
-- ARGV[3..4] owner, limit (unused)
-- ARGV[5]  queue: "1" to join (or stay in) the queue when refused
-- ARGV[6]  queue TTL in milliseconds: a waiter not refreshed by then is
--          dropped, judged by this server's clock
-- ARGV[7]  fence retention in milliseconds (see clock_lib)
-- ARGV[8]  optional: a proposed fence floor (see clock_lib), or ""
-- ARGV[9..12] optional: the request's record (see hold_lib), written with
--          a grant to the caller, or kept with its queue place for a
--          handoff; ARGV[2] is then at most its max hold
--
-- A handoff publishes "<sha1hex(token)> <fence>" on the channel the waiter
-- queued with (SPUBLISH; PUBLISH on servers before Redis 7), so only the
-- waiter's store receives it, and the waiter learns its grant from the
-- message; the token itself never travels.
local H, F, Q, QX, W, LOG, REC = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[8]

-- holder returns the holding token and its fence, or nil.
local function holder()
  local v = redis.call('GET', H)
  if not v then
    return nil, nil
  end
  local f, tok = string.match(v, '^(%d+)|(.*)$')
  return tok, tonumber(f)
end

local function unqueue(tok)
  redis.call('ZREM', Q, tok)
  redis.call('ZREM', QX, tok)
  redis.call('HDEL', W, 't:' .. tok, 'r:' .. tok)
end

-- record returns the hold's record when it names tok.
local function record(tok)
  local r = rec_parse(redis.call('GET', REC))
  if r and r.tok == tok then
    return r
  end
  return nil
end

-- queued_record returns the record a waiter queued with, as ARGV[9..12]
-- would carry it, or nil.
local function queued_record(tok)
  local v = redis.call('HGET', W, 'r:' .. tok)
  if not v then
    return nil
  end
  local mn, mx, hl, rest = string.match(v, '^(%d+) (%d+) (%d+) (.*)$')
  if not mn then
    return nil
  end
  hl = tonumber(hl)
  return {mn, mx, string.sub(rest, 1, hl), string.sub(rest, hl + 1)}
end

-- audit appends an event to the audit stream, which it keeps for a day
-- after its last event: every write may be the one that creates the stream
-- (the last one's day ran out while a lease was renewed), and a key without
-- a TTL would stay forever.
local function audit(event, f, tok)
  redis.call('XADD', LOG, 'MAXLEN', '~', 1000, '*', 'event', event, 'fence', string.format('%.0f', f),
    'holder', string.sub(redis.sha1hex(tok), 1, 12))
  redis.call('PEXPIRE', LOG, 86400000)
end

local function own(v)
  return v == 'dlock:fair'
end

local function grant(tok, ttl)
  local f = fence(ttl)
  redis.call('SET', H, string.format('%.0f', f) .. '|' .. tok, 'PX', ttl)
  mark('dlock:fair', ttl, own)
  audit('grant', f, tok)
  return f
end

-- prune drops the waiters whose queue entry ran out.
local function prune()
  for _, tok in ipairs(redis.call('ZRANGEBYSCORE', QX, '-inf', now())) do
    unqueue(tok)
  end
end

-- promote hands the free lock to the head waiter, tells the waiter's store,
-- and returns the new holder and fence (nil when nobody waits, or while
-- another pattern holds the name).
local function promote()
  if blocker(own) then
    return nil, nil
  end
  local head = redis.call('ZRANGE', Q, 0, 0)[1]
  if not head then
    return nil, nil
  end
  local ttl, ch = string.match(redis.call('HGET', W, 't:' .. head) or '', '^(%d+) (.*)$')
  -- The grant is held for the waiter until its queue deadline at most,
  -- when its place would have been dropped: the claim window. Alive, the
  -- waiter comes back by then (woken by the handoff, or to refresh its
  -- place), learns that it holds, and takes its own TTL (fair_acquire);
  -- dead, or a place nobody refreshes, it keeps the others waiting no
  -- longer than its queue place would have. Without an entry (its key was
  -- lost, or another version of these scripts queued the waiter) the whole
  -- window is the grant. (A place without a deadline, which prune never
  -- drops, is held for 1 ms: passed over.)
  local window = math.max((tonumber(redis.call('ZSCORE', QX, head)) or 0) - now(), 1)
  ttl = tonumber(ttl)
  if not ttl or ttl < 1 or ttl > window then
    ttl = window
  end
  local qr = queued_record(head)
  if qr and tonumber(qr[2]) > 0 then
    ttl = math.min(ttl, tonumber(qr[2]))
  end
  unqueue(head)
  local f = grant(head, ttl)
  if qr then
    redis.call('SET', REC, rec_new(head, f, qr), 'PX', ttl)
  end
  if ch and ch ~= '' then
    local msg = redis.sha1hex(head) .. ' ' .. string.format('%.0f', f)
    local r = redis.pcall('SPUBLISH', ch, msg)
    if type(r) == 'table' and r.err then
      redis.call('PUBLISH', ch, msg)
    end
  end
  return head, f
end
