-- mutex_force: end the mutex hold of a name without its token
-- (store.ForceReleaser): dlock's (a multi-lock's name too) or a foreign
-- library's token in the lock key, even one a release left to its min end.
-- The fence key and the slot's mark are kept, so the next grant's fence is
-- above the ended hold's; a live registered waiter is handed the lock, as
-- a release hands it, and is woken by its channel.
--
-- KEYS     as mutex_release's
-- ARGV[7]  fence retention in milliseconds (see mutex_acquire; where the
--          patterns' force scripts read it too)
--
-- Reply: {holder, since, data, fence} of the hold ended (see rec_owner;
-- "", 0, "" and the last fence for one without a record), or {} when the
-- lock key is free or holds another pattern's marker (see name_lib).
hold_lib()
local v = redis.call('GET', KEYS[1])
if not v or string.sub(v, 1, 6) == 'dlock:' then
  return {}
end
local f = tonumber(redis.call('GET', KEYS[2])) or 0
local r = rec_parse(redis.call('GET', KEYS[6]))
if r and r.tok ~= v then
  r = nil
end
redis.call('DEL', KEYS[6])
local owner = rec_owner(r, f)
while redis.call('GET', KEYS[5]) == '1' do
  local e = redis.call('ZPOPMIN', KEYS[3])
  if #e == 0 then
    redis.call('DEL', KEYS[5])
    break
  end
  if tonumber(e[2]) > now() then
    local ttl, n, rest = string.match(e[1], '^(%d+) (%d+) (.*)$')
    n = tonumber(n)
    if ttl and n and #rest > n then
      local ch, tok = string.sub(rest, 1, n), string.sub(rest, n + 1)
      local fs = dec(issue_or_fail(KEYS[2], KEYS[7], tonumber(ttl), tonumber(ARGV[7])))
      redis.call('SET', KEYS[1], tok, 'PX', ttl)
      local msg = redis.sha1hex(tok) .. ' ' .. fs
      local p = redis.pcall('SPUBLISH', ch, msg)
      if type(p) == 'table' and p.err then
        redis.call('PUBLISH', ch, msg)
      end
      return owner
    end
  end
end
redis.call('DEL', KEYS[1], KEYS[5])
return owner
