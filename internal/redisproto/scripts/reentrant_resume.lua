-- reentrant_resume: take back an acquisition of the reentrant lock by its
-- token (store.Resumer). KEYS and ARGV as reentrant_extend's.
--
-- Reply: {fence, ttl, max hold left, count} when ARGV[1] is a live
-- acquisition: the hold then lives at least ttl ms more (ARGV[2] capped at
-- the record's max end; never lowered), fence is the first grant's, count
-- the owner's live acquisitions. 0 when it is not, another holder has the
-- name, or the max end passed (nothing changed).
local H = KEYS[1]
if redis.call('HEXISTS', H, 't:' .. ARGV[1]) == 0 then
  return 0
end
local function own(v) return v == 'dlock:reentrant' end
if blocker(own) then
  return 0
end
local f = tonumber(redis.call('HGET', H, 'f'))
local r = rec_parse(redis.call('GET', KEYS[4]))
if r and r.fence ~= f then
  r = nil
end
local ttl = rec_ttl(r, tonumber(ARGV[2]))
if ttl <= 0 then
  return 0
end
if redis.call('PTTL', H) < ttl then
  redis.call('PEXPIRE', H, ttl)
  redis.call('SET', KEYS[3], '1', 'PX', ttl)
  if r then
    redis.call('PEXPIRE', KEYS[4], ttl)
  end
  mark('dlock:reentrant', ttl, own)
  keep_fence(ttl)
end
return {f, ttl, rec_left(r), redis.call('HLEN', H) - 2}
