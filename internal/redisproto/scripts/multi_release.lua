-- multi_release: release the plain mutex keys of N names held by one token
-- (dlock.Multi), each exactly as mutex_release does: compare-and-delete, or
-- hand the name over to a live registered waiter of that name, with a new
-- fence and a publish on the waiter's channel.
--
-- KEYS      as multi_acquire's
-- ARGV[1]   token
-- ARGV[2]   fence retention in milliseconds (see mutex_acquire)
--
-- Reply: {r_1, ..., r_N}: r_i is 1 when ARGV[1] held name i (now released,
-- or handed to a waiter, or, before its record's min end, left to expire
-- there, the record marked released); 0 when it did not (that name is left
-- unchanged).
hold_lib()
local me = ARGV[1]

-- handoff gives name i to its first live registered waiter, as
-- mutex_release does; it returns false when no waiter is left.
local function handoff(i)
  local key, fk, waiters, flag, mk = KEYS[6 * i - 5], KEYS[6 * i - 4], KEYS[6 * i - 3], KEYS[6 * i - 2], KEYS[6 * i]
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
        local f = issue_or_fail(fk, mk, tonumber(ttl), tonumber(ARGV[2]))
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

-- kept leaves name i to expire at its record's min end, and reports
-- whether it did (or had).
local function kept(i, v)
  local r = rec_parse(v)
  if not (r and r.tok == me) then
    return false
  end
  if r.released then
    return true
  end
  if not rec_kept(r) then
    redis.call('DEL', KEYS[6 * i - 1])
    return false
  end
  local at = dec(r.min)
  redis.call('PEXPIREAT', KEYS[6 * i - 5], at)
  redis.call('SET', KEYS[6 * i - 1], rec_released(r), 'PXAT', at)
  redis.call('PEXPIREAT', KEYS[6 * i - 2], at, 'GT')
  keep(KEYS[6 * i - 4], r.min - now(), tonumber(ARGV[2]))
  return true
end

local reply = {}
for i = 1, #KEYS / 6 do
  reply[i] = 0
  local v = redis.call('MGET', KEYS[6 * i - 5], KEYS[6 * i - 2], KEYS[6 * i - 1])
  if v[1] == me then
    reply[i] = 1
    if v[2] == 'r' then
      -- A record and no waiter (see mutex_release).
      if not kept(i, v[3]) then
        redis.call('DEL', KEYS[6 * i - 5], KEYS[6 * i - 2])
      end
    elseif not (v[3] and kept(i, v[3])) and not (v[2] and handoff(i)) then
      redis.call('DEL', KEYS[6 * i - 5])
    end
  end
end
return reply
