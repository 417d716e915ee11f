-- clock_lib: the server clock and the fence counter, prepended to every
-- script of the read-write lock, the fair lock and the semaphore (before
-- their own lib). For all of them KEYS[2] is the lock's fence counter and
-- ARGV[7] the fence retention in milliseconds.

local now_ms
-- now is the server's time in milliseconds, read once per script.
local function now()
  if not now_ms then
    local t = redis.call('TIME')
    now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end
  return now_ms
end

-- fence issues the name's next fence for a grant of TTL ttl ms: last + 1
-- (INCR, which keeps the counter's expiry), or the clock floor, server time
-- in ms * 1000, when the counter is absent; a counter so created is kept for
-- max(ARGV[7], ttl + 1 min). See mutex_acquire.
local function fence(ttl)
  local f = redis.call('INCR', KEYS[2])
  if f < 1e15 then
    f = math.max(f, now() * 1000)
    local keep = math.max(tonumber(ARGV[7]), ttl + 60000)
    redis.call('SET', KEYS[2], string.format('%.0f', f), 'PX', string.format('%.0f', keep))
  end
  return f
end
