-- election_acquire: make a candidate the leader when nobody holds the name,
-- or refresh the leadership of the token that already leads.
--
-- KEYS[1]  leadership: hash, "t" -> leader's token, "v" -> its value,
--          "f" -> its term (the grant's fence); its TTL is the hold's
-- KEYS[2]  fence key: the last fence issued for this lock name (clock_lib)
-- KEYS[3]  gate: string holding the term, with the hold's TTL, written by a
--          grant and deleted by a resignation; the key that waiting
--          candidates and observers watch (CLIENT TRACKING)
-- KEYS[4]  the hold's record (see hold_lib), expiring with the hold
-- KEYS[5]  main key "lock:<name>": "dlock:election" while a leader holds the
--          name (see name_lib)
-- KEYS[6]  the fence mark of the lock's hash slot (see clock_lib)
-- ARGV[1]  token
-- ARGV[2]  TTL in milliseconds
-- ARGV[3]  the candidate's value
-- ARGV[7]  fence retention in milliseconds: the fence key is kept this
--          long past the hold's TTL
-- ARGV[8]  optional: a proposed fence floor (see clock_lib), or ""
-- ARGV[9..12] optional: the request's record (see hold_lib), written with
--          a new grant; ARGV[2] is then at most its max hold. A repeat is
--          capped at the record's max end; after a release left the hold
--          to its min end, a repeat is refused (held 6).
--
-- Reply: {1, term, 0} when ARGV[1] leads after the call; a repeat by the
-- leader refreshes the TTL and keeps its first value and term. {0, 0, pttl,
-- 0, 0, held} when another leader (held 6) or another pattern (see
-- name_lib) holds the name.
local H = KEYS[1]
local me, ttl = ARGV[1], tonumber(ARGV[2])
local function own(v) return v == 'dlock:election' end
local held, left = blocker(own)
if held then
  return {0, 0, left, 0, 0, held}
end
local cur = redis.call('HGET', H, 't')
local R = KEYS[4]
if cur == me then
  local r = rec_parse(redis.call('GET', R))
  if r and r.tok == me then
    if r.released then
      return {0, 0, math.max(redis.call('PTTL', H), 1), 0, 0, 6}
    end
    ttl = math.max(rec_ttl(r, ttl), 1)
    redis.call('PEXPIRE', R, ttl)
  end
  redis.call('PEXPIRE', H, ttl)
  redis.call('PEXPIRE', KEYS[3], ttl)
  mark('dlock:election', ttl, own)
  keep_fence(ttl)
  return {1, tonumber(redis.call('HGET', H, 'f')), 0}
end
if cur then
  left = redis.call('PTTL', H)
  if left == 0 then
    left = 1
  end
  return {0, 0, left, 0, 0, 6}
end
local f = fence(ttl)
redis.call('HSET', H, 't', me, 'v', ARGV[3], 'f', string.format('%.0f', f))
redis.call('PEXPIRE', H, ttl)
redis.call('SET', KEYS[3], string.format('%.0f', f), 'PX', ttl)
mark('dlock:election', ttl, own)
if rec_wanted(9) then
  redis.call('SET', R, rec_new(me, f, rec_argv(9)), 'PX', ttl)
end
return {1, f, 0}
