-- election_release: resign the leadership of a token.
--
-- KEYS[1]  leadership (see election_acquire): deleted
-- KEYS[2]  fence key (kept: it expires the fence retention after the hold's TTL)
-- KEYS[3]  gate (see election_acquire): deleted, which wakes waiting
--          candidates and observers
-- KEYS[4]  main key (see name_lib): deleted with the leadership
-- ARGV[1]  token
--
-- Reply: 1 when ARGV[1] led (now resigned); 0 when it did not (nothing
-- changed).
if redis.call('HGET', KEYS[1], 't') ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1], KEYS[3])
mark('dlock:election', 0, function(v) return v == 'dlock:election' end)
return 1
