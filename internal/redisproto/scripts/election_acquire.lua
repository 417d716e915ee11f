-- election_acquire: make a candidate the leader when nobody holds the name,
-- or refresh the leadership of the token that already leads.
--
-- KEYS[1]  leadership: hash, "t" -> leader's token, "v" -> its value,
--          "f" -> its term (the grant's fence); its TTL is the hold's
-- KEYS[2]  fence key: the last fence issued for this lock name (clock_lib)
-- KEYS[3]  gate: string holding the term, with the hold's TTL, written by a
--          grant and deleted by a resignation; the key that waiting
--          candidates and observers watch (CLIENT TRACKING)
-- KEYS[4]  main key "lock:<name>": "dlock:election" while a leader holds the
--          name (see name_lib)
-- KEYS[5]  the fence mark of the lock's hash slot (see clock_lib)
-- ARGV[1]  token
-- ARGV[2]  TTL in milliseconds
-- ARGV[3]  the candidate's value
-- ARGV[7]  fence retention in milliseconds: the fence key is kept this
--          long past the hold's TTL
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
if cur == me then
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
return {1, f, 0}
