-- multi_release: release the plain mutex keys of N names held by one token
-- (dlock.Multi), each exactly as mutex_release does: compare-and-delete, or
-- hand the name over to a live registered waiter of that name, with a new
-- fence and a publish on the waiter's channel.
--
-- KEYS[5i-4]  lock key of name i (i = 1..N)
-- KEYS[5i-3]  fence key of name i
-- KEYS[5i-2]  waiters of name i (see mutex_acquire)
-- KEYS[5i-1]  waiters flag of name i (see mutex_acquire)
-- KEYS[5i]    the fence mark of name i's hash slot (see clock_lib)
-- ARGV[1]     token
-- ARGV[2]     fence retention in milliseconds (see mutex_acquire)
--
-- Reply: {r_1, ..., r_N}: r_i is 1 when ARGV[1] held name i (now released,
-- or handed to a waiter); 0 when it did not (that name is left unchanged).
local me = ARGV[1]

-- handoff gives name i to its first live registered waiter, as
-- mutex_release does; it returns false when no waiter is left.
local function handoff(i)
  local key, fk, waiters, flag, mk = KEYS[5 * i - 4], KEYS[5 * i - 3], KEYS[5 * i - 2], KEYS[5 * i - 1], KEYS[5 * i]
  while true do
    local e = redis.call('ZPOPMIN', waiters)
    if #e == 0 then
      redis.call('DEL', flag)
      return false
    end
    if tonumber(e[2]) > now() then
      local ttl, n, rest = string.match(e[1], '^(%d+) (%d+) (.*)$')
      n = tonumber(n)
      if ttl and n and #rest > n then
        local ch, tok = string.sub(rest, 1, n), string.sub(rest, n + 1)
        local f = issue(fk, mk, tonumber(ttl), tonumber(ARGV[2]))
        redis.call('SET', key, tok, 'PX', ttl)
        local msg = redis.sha1hex(tok) .. ' ' .. string.format('%.0f', f)
        local r = redis.pcall('SPUBLISH', ch, msg)
        if type(r) == 'table' and r.err then
          redis.call('PUBLISH', ch, msg)
        end
        return true
      end
    end
  end
end

local reply = {}
for i = 1, #KEYS / 5 do
  reply[i] = 0
  local v = redis.call('MGET', KEYS[5 * i - 4], KEYS[5 * i - 1])
  if v[1] == me then
    reply[i] = 1
    if not (v[2] and handoff(i)) then
      redis.call('DEL', KEYS[5 * i - 4])
    end
  end
end
return reply
