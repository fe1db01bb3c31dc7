-- lib_reservation.lua: where reservations live, for admit.lua, settle.lua and refund.lua. Not a
-- script of its own: tools/embed.py puts this text in place of a `-- @include
-- lib_reservation.lua` line of a script.
--
-- A reservation is one field of a per-tenant hash of its time window, not a key of its own, so
-- that an open reservation costs about 100 bytes of Redis memory instead of about 240: the hash
-- "<prefix><ttl>:<w>" (prefix "dg:{t:<tenant>}:r:", w = floor(now_s / ttl), ttl =
-- reservation_ttl_s) holds the reservations created in window w and expires at (w + 2) * ttl + 1,
-- after the last of them. A reservation is live until created + ttl, read from its value, so its
-- lifetime is exact; lookups read the current window and the previous one.
--
--   field request_id  "<attempt> <reserved> <created_ms>" while open, "... <charged>" once
--                     settled (the quota month is that of created_ms)
--   field "#"         the number of open reservations of the window (not settled, not refunded)
--   field "x:<attempt>" an admit.lua attempt refund.lua cancelled before it ran (written in the
--                     window of that time and the next one)

-- The current window's key, the previous one's, and the current window's expiry (unix s).
local function res_windows(prefix, ttl, sec)
  local w = math.floor(sec / ttl)
  return prefix .. ttl .. ':' .. w, prefix .. ttl .. ':' .. (w - 1), (w + 2) * ttl + 1
end

-- The next window's key.
local function res_window_after(prefix, ttl, sec)
  return prefix .. ttl .. ':' .. (math.floor(sec / ttl) + 1)
end

-- A reservation's value: attempt, reserved, created_ms, and charged (nil while open).
local function res_parse(v)
  local a, r, c, ch = string.match(v, '^(%S+) (%S+) (%S+) ?(%S*)$')
  return a, tonumber(r), tonumber(c), tonumber(ch)
end

-- The reservation of request_id live at now_ms: its window key and value, or nil.
local function res_find(cur_key, prev_key, rid, ttl, now_ms)
  for _, k in ipairs({cur_key, prev_key}) do
    local v = redis.call('HGET', k, rid)
    if v then
      local _, _, created = res_parse(v)
      if created + ttl * 1000 > now_ms then return k, v end
    end
  end
  return nil
end
