-- fence_lib: fence write-backs, and the patterns' fences, prepended after
-- clock_lib to every script but the mutex's fast-path acquire (see
-- clock_lib). The patterns' scripts (read-write, fair, semaphore,
-- reentrant, election) call fence, keep_fence and raise, for which KEYS[2]
-- is the lock name's fence key, the last key (KEYS[#KEYS], after the main
-- key) its slot's fence mark, ARGV[7] the fence retention in milliseconds
-- and ARGV[8], when given, a fence floor proposed by store/redlock; the
-- mutex and multi-lock scripts call issue, keep and raise with their own
-- keys.

-- raise makes fence key fk and mark mk at least f, for a hold that ends
-- left ms from now (Redlock's write-back), keeping fk rho ms past it.
local function raise(fk, mk, f, left, rho)
  local c = redis.call('GET', fk)
  if not c then
    redis.call('SET', fk, dec(f), 'PX', dec(math.max(left, 0) + rho))
    redis.call('ZADD', mk, 'GT', f, 'm')
    return
  end
  if f > (tonumber(c) or 0) then
    redis.call('SET', fk, dec(f), 'KEEPTTL')
  end
  keep(fk, math.max(left, 0), rho)
  redis.call('ZADD', mk, 'GT', f, 'm')
end

-- issue_or_fail is issue, raising its error reply (the script ends there,
-- with what it wrote before the call).
local function issue_or_fail(fk, mk, ttl, rho, floor)
  local f, e = issue(fk, mk, ttl, rho, floor)
  if not f then
    error(e)
  end
  return f
end

-- fence issues the name's next fence for a pattern's grant of TTL ttl ms,
-- taking the floor store/redlock proposed in ARGV[8], if any.
local function fence(ttl)
  return issue_or_fail(KEYS[2], KEYS[#KEYS], ttl, tonumber(ARGV[7]), tonumber(ARGV[8]))
end

-- keep_fence keeps the name's fence key for a pattern's hold that now ends
-- ttl ms from now.
local function keep_fence(ttl)
  keep(KEYS[2], ttl, tonumber(ARGV[7]))
end
