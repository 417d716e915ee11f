-- multi_release: release the plain mutex keys of N names held by one token
-- (dlock.Multi), each exactly as mutex_release does: compare-and-delete, or
-- hand the name over to a live registered waiter of that name, with a new
-- fence and a publish on the waiter's channel.
--
-- KEYS[4i-3]  lock key of name i (i = 1..N)
-- KEYS[4i-2]  fence counter of name i
-- KEYS[4i-1]  waiters of name i (see mutex_acquire)
-- KEYS[4i]    waiters flag of name i (see mutex_acquire)
-- ARGV[1]     token
-- ARGV[2]     fence retention in milliseconds (see mutex_acquire)
--
-- Reply: {r_1, ..., r_N}: r_i is 1 when ARGV[1] held name i (now released,
-- or handed to a waiter); 0 when it did not (that name is left unchanged).
local me = ARGV[1]
local now
local function clock()
  if not now then
    local t = redis.call('TIME')
    now = {tonumber(t[1]), tonumber(t[2])}
  end
  return now
end

-- handoff gives name i to its first live registered waiter, as
-- mutex_release does; it returns false when no waiter is left.
local function handoff(i)
  local key, counter, waiters, flag = KEYS[4 * i - 3], KEYS[4 * i - 2], KEYS[4 * i - 1], KEYS[4 * i]
  while true do
    local e = redis.call('ZPOPMIN', waiters)
    if #e == 0 then
      redis.call('DEL', flag)
      return false
    end
    local c = clock()
    if tonumber(e[2]) > c[1] * 1000 + math.floor(c[2] / 1000) then
      local ttl, n, rest = string.match(e[1], '^(%d+) (%d+) (.*)$')
      n = tonumber(n)
      if ttl and n and #rest > n then
        local ch, tok = string.sub(rest, 1, n), string.sub(rest, n + 1)
        local f = redis.call('INCR', counter)
        if f < 1e15 then
          f = math.max(f, c[1] * 1000000 + math.floor(c[2] / 1000) * 1000)
          local keep = string.format('%.0f', math.max(tonumber(ARGV[2]), tonumber(ttl) + 60000))
          redis.call('SET', counter, string.format('%.0f', f), 'PX', keep)
        end
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
for i = 1, #KEYS / 4 do
  reply[i] = 0
  local v = redis.call('MGET', KEYS[4 * i - 3], KEYS[4 * i])
  if v[1] == me then
    reply[i] = 1
    if not (v[2] and handoff(i)) then
      redis.call('DEL', KEYS[4 * i - 3])
    end
  end
end
return reply
