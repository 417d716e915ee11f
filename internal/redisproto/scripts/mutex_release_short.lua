-- mutex_release_short: the mutex release of a name the caller has seen no
-- waiters on: compare-and-delete, unless the waiters flag says there may be
-- waiters to hand over to (then mutex_release, the full form, does it).
--
-- KEYS[1]  lock key
-- KEYS[2]  waiters flag (see mutex_acquire): absent, there is no waiter
-- ARGV[1]  token
--
-- Reply: 1 when ARGV[1] held the lock (now released); 0 when it did not
-- (nothing changed); -1 when the flag is set: there may be waiters to hand
-- over to or a registration to drop, and nothing changed; the caller sends
-- the full form.
--
-- Two calls: MGET of the lock key and the flag, then DEL. A script of its
-- own, without clock_lib, which a handoff needs and this path never does:
-- each function a script defines is made anew on every call.
local v = redis.call('MGET', KEYS[1], KEYS[2])
if v[2] then
  return -1
end
if v[1] ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1])
return 1
