-- lib_reservation.lua: where reservations live, for admit.lua, settle.lua and refund.lua. Not a
-- script of its own: tools/embed.py puts this text in place of a `-- @include
-- lib_reservation.lua` line of a script.
--
-- A reservation is one field of a per-tenant hash of its time window, not a key of its own, so
-- that an open reservation costs about 100 bytes of Redis memory instead of about 240: the hash
-- "dg:{t:<tenant>}:r:<ttl>:<w>" (w = floor(now_s / ttl), ttl =
-- reservation_ttl_s) holds the reservations created in window w and expires at (w + 2) * ttl + 1,
-- after the last of them. A reservation is live until created + ttl, read from its value, so its
-- lifetime is exact; lookups read the current window and the previous one.
--
--   field request_id  "<attempt> <reserved> <created>" while open, "... <charged>" once
--                     settled; attempt is "-" for an id the engine generated (the id names the
--                     call already), created is in ms since the window began (the quota month
--                     is that of the creation time). Both keep a typical value within 14 bytes,
--                     the largest that Redis stores in a 16-byte allocation.
--   field "#"         the number of open reservations of the window (not settled, not refunded)
--   field "x:<attempt>" an admit.lua attempt refund.lua cancelled before it ran (written in the
--                     window of that time and the next one); for an id the engine generated,
--                     the field request_id with the value "x" instead (the id names the call),
--                     which is no reservation: readers skip it
--
-- Redis keeps a small hash as a listpack (up to hash-max-listpack-entries fields, 512 or 128
-- by Redis's configuration), where each field looked up is a scan of the list, and an admission
-- looks up fields that are absent (request_id in its HMGET, or in its HSETNX for an
-- engine-generated id, "x:<attempt>" for a client's id, request_id again in its HSET) and inserts one: about 320 instructions per field of the window on every admission,
-- 10,000 per call on average over a window's first 3,000 with 512 entries (admit_lua_cost.sh
-- --calls 3000). So admit.lua makes a window a hash table after about 32 admissions (one
-- admission in 32 of a window that exists, at random, so that settled reservations, which stay
-- fields without being counted open, count too; its fields stay the same, only Redis's
-- encoding changes; it takes a hash-max-listpack-value below 72, see admit.lua): its
-- lookups no longer depend on its size, and it takes about 96 bytes of Redis memory per
-- reservation instead of about 40, as any window beyond the listpack's limit already does. A
-- window of a single admission stays a listpack.

-- The current window's key, the previous one's, the next one's, the current window's expiry
-- (unix s) and the current window's number w; the keys are nil when not declared. A script
-- touches only keys it declares (a Redis Cluster routes a call by its KEYS), and a window is
-- Redis TIME's: the gateway declares the five windows around its own clock's window res_base
-- (KEYS res_m2, res_m1, res_0, res_p1, res_p2 = windows res_base - 2 .. res_base + 2). A script
-- needs w - 1 .. w + 1, so Redis TIME may be up to a window (reservation_ttl_s) off the gateway's
-- clock either way. Each key is taken from KEYS by its window's distance d from res_base, with no
-- table of the five made (each table a call makes costs Redis about a thousand instructions);
-- the bounds are constants once tools/embed.py has put the K_ numbers in.
local function res_windows(ttl, sec)
  local w = (sec - sec % ttl) / ttl  -- floor(sec / ttl), exactly, without a library call
  local d = w - ARGV[A_RES_BASE]
  return d >= K_RES_M2 - K_RES_0 and d <= K_RES_P2 - K_RES_0 and KEYS[K_RES_0 + d] or nil,
         d >= K_RES_M1 - K_RES_0 and d <= K_RES_P2 - K_RES_0 + 1 and KEYS[K_RES_0 + d - 1] or nil,
         d >= K_RES_M2 - K_RES_0 - 1 and d <= K_RES_P1 - K_RES_0 and KEYS[K_RES_0 + d + 1] or nil,
         (w + 2) * ttl + 1, w
end

-- A reservation's value, found in window w: attempt, reserved, created (unix ms), and charged
-- (nil while open). A created time above the window length is a unix time already (a value
-- written before it was stored relative to its window).
local function res_parse(v, w, ttl)
  local a, r, c, ch = string.match(v, '^(%S+) (%S+) (%S+) ?(%S*)$')
  c = tonumber(c)
  if c < ttl * 1000 then c = c + w * ttl * 1000 end
  return a, tonumber(r), c, tonumber(ch)
end

-- The reservation of request_id live at now_ms, with cur_key/prev_key the windows w and w - 1:
-- its window key, value and parsed fields, or nil.
local function res_find(cur_key, prev_key, w, rid, ttl, now_ms)
  for i, k in ipairs({cur_key, prev_key}) do
    local v = redis.call('HGET', k, rid)
    if v and v ~= 'x' then
      local a, r, c, ch = res_parse(v, w + 1 - i, ttl)
      if c + ttl * 1000 > now_ms then return k, v, a, r, c, ch end
    end
  end
  return nil
end
