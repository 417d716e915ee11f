-- reentrant_acquire: take or re-enter the reentrant lock.
--
-- KEYS[1]  hold: hash, "o" -> owner, "f" -> fence of the first grant,
--          "t:"..token -> 1 for each live acquisition; its TTL is the hold's,
--          so when it runs out every acquisition ends at once
-- KEYS[2]  fence key: the last fence issued for this lock name (clock_lib)
-- KEYS[3]  gate: string with the hold's TTL, deleted with the hold; the key
--          waiters watch (CLIENT TRACKING)
-- KEYS[4]  the hold's record (see hold_lib; it names the owner and the
--          first grant's fence), expiring with the hold
-- KEYS[5]  main key "lock:<name>": "dlock:reentrant" while the hold lasts
--          (see name_lib)
-- KEYS[6]  the fence mark of the lock's hash slot (see clock_lib)
-- ARGV[1]  token (one per acquisition)
-- ARGV[2]  TTL in milliseconds
-- ARGV[3]  owner (the token when not given)
-- ARGV[7]  fence retention in milliseconds: the fence key is kept this
--          long past the hold's TTL
-- ARGV[8]  optional: a proposed fence floor (see clock_lib), or ""
-- ARGV[9..12] optional: the request's record (see hold_lib), written by
--          the first grant; re-entries keep it, and every raise of the
--          hold's TTL is capped at its max end.
--
-- Reply: {1, fence, 0, count} when ARGV[1] holds an acquisition after the
-- call: count is the owner's live acquisitions, fence that of the first
-- grant; a repeat by the same token changes nothing but the TTL. The hold's
-- TTL is raised to ARGV[2], never lowered. {0, 0, pttl, 0, 0, held} when
-- another owner (held 1) or another holder of the main key (see name_lib)
-- has the name, a repeat included (nothing changed).
local H, G = KEYS[1], KEYS[3]
local me, ttl, owner = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local function own(v) return v == 'dlock:reentrant' end
-- raise makes the hold live ttl ms more (never less), capped at its
-- record's max end.
local function raise_to(ttl)
  local r = rec_parse(redis.call('GET', KEYS[4]))
  if r and r.fence ~= tonumber(redis.call('HGET', H, 'f')) then
    r = nil
  end
  ttl = rec_ttl(r, ttl)
  if redis.call('PTTL', H) < ttl then
    redis.call('PEXPIRE', H, ttl)
    redis.call('SET', G, '1', 'PX', ttl)
    if r then
      redis.call('PEXPIRE', KEYS[4], ttl)
    end
    mark('dlock:reentrant', ttl, own)
    keep_fence(ttl)
  end
end
local held, left = blocker(own)
if held then
  return {0, 0, left, 0, 0, held}
end
if redis.call('EXISTS', H) == 1 and redis.call('HEXISTS', H, 't:' .. me) == 1 then
  -- A repeat by a live acquisition.
  raise_to(ttl)
  return {1, tonumber(redis.call('HGET', H, 'f')), 0, redis.call('HLEN', H) - 2}
end
if redis.call('EXISTS', H) == 1 then
  if redis.call('HGET', H, 'o') ~= owner then
    return {0, 0, redis.call('PTTL', H), 0, 0, 1}
  end
  redis.call('HSET', H, 't:' .. me, 1)
  raise_to(ttl)
  return {1, tonumber(redis.call('HGET', H, 'f')), 0, redis.call('HLEN', H) - 2}
end
local f = fence(ttl)
redis.call('HSET', H, 'o', owner, 'f', string.format('%.0f', f), 't:' .. me, 1)
redis.call('PEXPIRE', H, ttl)
redis.call('SET', G, '1', 'PX', ttl)
mark('dlock:reentrant', ttl, own)
if rec_wanted(9) then
  redis.call('SET', KEYS[4], rec_new(owner, f, rec_argv(9)), 'PX', ttl)
end
return {1, f, 0, 1}
