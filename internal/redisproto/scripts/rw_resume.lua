-- rw_resume: take back a read or write lease by its token (store.Resumer).
-- KEYS and ARGV: see rw_lib. Joined after rw_side_read.lua or
-- rw_side_write.lua, which say the side (WRITE).
--
-- Reply: {fence, ttl, max hold left} when ARGV[1] holds that side (its
-- lease now ends ttl ms from now, ARGV[2] capped at its record's max end);
-- 0 when it does not, another holder has the name, or the max end passed
-- (nothing changed).
local me = ARGV[1]
prune()
if blocker(own) then
  return 0
end
if (redis.call('HGET', M, 'w') == me) ~= WRITE then
  return 0
end
local f, ttl, left = refresh(me, tonumber(ARGV[2]))
if not f then
  return 0
end
sync()
return {f, ttl, left}
