-- election_release: resign the leadership of a token.
--
-- KEYS[1]  leadership (see election_acquire): deleted
-- KEYS[2]  fence key (kept: it expires the fence retention after the hold's TTL)
-- KEYS[3]  gate (see election_acquire): deleted, which wakes waiting
--          candidates and observers
-- KEYS[4]  the hold's record (see hold_lib): deleted with the leadership
-- KEYS[5]  main key (see name_lib): deleted with the leadership
-- ARGV[1]  token
--
-- Reply: 1 when ARGV[1] led (now resigned, or, before its record's min
-- end, left to expire there, the record marked released); 0 when it did
-- not (nothing changed).
if redis.call('HGET', KEYS[1], 't') ~= ARGV[1] then
  return 0
end
local own = function(v) return v == 'dlock:election' end
local r = rec_parse(redis.call('GET', KEYS[4]))
if r and r.tok == ARGV[1] then
  if r.released then
    return 1
  end
  if rec_kept(r) then
    local at = dec(r.min)
    redis.call('PEXPIREAT', KEYS[1], at)
    redis.call('PEXPIREAT', KEYS[3], at)
    redis.call('SET', KEYS[4], rec_released(r), 'PXAT', at)
    mark('dlock:election', r.min - now(), own)
    keep_fence(r.min - now())
    return 1
  end
end
redis.call('DEL', KEYS[1], KEYS[3], KEYS[4])
mark('dlock:election', 0, own)
return 1
