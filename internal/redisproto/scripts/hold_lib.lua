-- hold_lib: a hold's record (store.Request's Holder, Data, MinHold and
-- MaxHold; issue 38), prepended after clock_lib to the scripts that write,
-- honour or show it. A record is written only by a grant whose request
-- carries one (its four ARGV, below, not all empty), atomically with the
-- grant, and goes with the hold: deleted by its release, expiring with it.
-- It is a string,
--
--   "<since> <min end> <max end> <fence> <released> <#token> <#holder> <token><holder><data>"
--
-- since the grant and the ends in server ms (0: no min or max hold),
-- released "1" once a release before the min end left the hold to expire
-- there. Exclusive holds keep it in the string key "{t}:hold" (with the
-- hold's TTL); shared holds (readers, the writer beside them, permits) in
-- the hash "{t}:holds", token -> record. A record counts only while the
-- live hold it names (its token, or its fence) is the name's: a stale one
-- (a foreign DEL, then another holder) is never shown nor obeyed.
--
-- The request's record, at ARGV[base .. base + 3]: min hold ms, max hold
-- ms ("0" for none), holder, data.

-- The functions are made by hold_lib(), which a script calls before it
-- uses them: the mutex's scripts only on the paths that meet a record, so
-- that its fast path makes no closure for them (each function a script
-- defines is made anew on every call); the store joins a call to it after
-- this file for the other scripts.
local rec_wanted, rec_argv, rec_new, rec_parse, rec_released, rec_ttl, rec_left, rec_kept, rec_owner

local function hold_lib()
  if rec_parse then
    return
  end
  -- rec_wanted reports whether the request carries a record at base.
  rec_wanted = function(base)
    local mn = ARGV[base]
    return mn ~= nil and (mn ~= '0' or ARGV[base + 1] ~= '0' or ARGV[base + 2] ~= '' or ARGV[base + 3] ~= '')
  end

  -- rec_argv returns the request's record at base: {min hold ms, max hold
  -- ms, holder, data}.
  rec_argv = function(base)
    return {ARGV[base], ARGV[base + 1], ARGV[base + 2], ARGV[base + 3]}
  end

  -- rec_new returns the record of a grant now to tok with fence f, from a
  -- request's record a (see rec_argv).
  rec_new = function(tok, f, a)
    local t = now()
    local mn, mx = tonumber(a[1]) or 0, tonumber(a[2]) or 0
    if mn > 0 then mn = t + mn end
    if mx > 0 then mx = t + mx end
    local holder, data = a[3] or '', a[4] or ''
    return dec(t) .. ' ' .. dec(mn) .. ' ' .. dec(mx) .. ' ' .. dec(f) .. ' 0 ' .. #tok .. ' ' .. #holder .. ' ' .. tok .. holder .. data
  end

  -- rec_parse decodes record v (nil for none or a malformed one).
  rec_parse = function(v)
    if not v then
      return nil
    end
    local s, mn, mx, f, st, tl, hl, rest = string.match(v, '^(%d+) (%d+) (%d+) (%d+) (%d) (%d+) (%d+) (.*)$')
    if not s then
      return nil
    end
    tl, hl = tonumber(tl), tonumber(hl)
    return {since = tonumber(s), min = tonumber(mn), max = tonumber(mx), fence = tonumber(f), released = st == '1',
      tok = string.sub(rest, 1, tl), holder = string.sub(rest, tl + 1, tl + hl), data = string.sub(rest, tl + hl + 1)}
  end

  -- rec_released returns record v marked released.
  rec_released = function(r)
    return dec(r.since) .. ' ' .. dec(r.min) .. ' ' .. dec(r.max) .. ' ' .. dec(r.fence) .. ' 1 ' .. #r.tok .. ' ' .. #r.holder .. ' ' .. r.tok .. r.holder .. r.data
  end

  -- rec_ttl caps ttl ms at record r's max end: 0 or less once it passed.
  rec_ttl = function(r, ttl)
    if r and r.max > 0 then
      return math.min(ttl, r.max - now())
    end
    return ttl
  end

  -- rec_left is what is left of r's max hold in ms (0: none).
  rec_left = function(r)
    if r and r.max > 0 then
      return math.max(r.max - now(), 0)
    end
    return 0
  end

  -- rec_kept reports whether a release of the hold of r must leave it to
  -- expire at its min end (then in the future).
  rec_kept = function(r)
    return r and r.min > now()
  end

  -- rec_owner is the Inspector's view of r: {holder, since, data, fence},
  -- or the unknown owner's with fence f.
  rec_owner = function(r, f)
    if not r then
      return {'', 0, '', f or 0}
    end
    return {r.holder, r.since, r.data, r.fence}
  end
end
