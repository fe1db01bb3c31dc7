-- refund.lua: undoes one admit.lua call (one attempt) so that a request the client was told
-- failed leaves nothing behind: after a global gate (gates.lua) refused the admission, after the
-- request was answered 503 and admit.lua's reply came late, and after its reply was lost (the
-- connection went away after the call was written, so it may or may not have run).
--
-- The reservation says whether the attempt ran: admit.lua writes it, with the attempt, exactly
-- when it admits. When request_id's open reservation holds another attempt or there is none,
-- this attempt was refused, has not run yet (it may still sit in a buffer of a Redis that was
-- stopped) or never will: it is marked cancelled in the current reservation window
-- (lib_reservation.lua), so that admit.lua refuses it should it ever run within
-- reservation_ttl_s, and nothing else is touched.
--
-- When it ran: buckets are restored byte for byte from the snapshot (the prior tk/ts, or the key
-- deleted when it did not exist) when nobody touched them since admit.lua wrote them; otherwise
-- (another admission built on our write, or no snapshot because the reply was lost) only what we
-- took is given back: tk + cost (1, or the estimate on a token-rate gate), capped at capacity,
-- which is the level the bucket would have had without our take, refill being computed from ts
-- when read. Each quota's counter of the
-- admission's period gets the reservation back (and disappears again if admit.lua created it;
-- a period before the previous one is over and left alone, lib_quota.lua),
-- the reservation is removed, the lease removed and the expired leases admit.lua pruned put back,
-- so with a snapshot the lease zset is as before too. Running it twice changes nothing more: the
-- reservation is gone.
--
-- @keys res_m2 res_m1 res_0 res_p1 res_p2 leases quota...(prev cur next) bucket...
-- @argv request_id attempt fresh reservation_ttl quota_existed res_base quota_count bucket_count
-- @argv quota...(prev_start start end next_end)
-- @argv bucket...(capacity cost old_tk old_ts new_tk new_ts)
--
-- @argv windows...(count member) pruned...(member score)
--
-- KEYS: res_m2 .. res_p2, quota...: the reservation windows and quota counters around the
--                     gateway's clock, as for admit.lua
--       leases        zset
--       bucket...     the bucket hashes admit.lua consumed from, then its sliding windows'
--                     sorted sets (windows.count of them)
-- ARGV: request_id
--       attempt          the admit.lua call's attempt
--       fresh            "1" when request_id was generated for that call (its reservation
--                        holds "-" for the attempt: the id names the call)
--       reservation_ttl  the plan's reservation_ttl_s
--       quota_existed    a character per quota, "1" when its counter existed before admit.lua
--                        (admit.lua's reply)
--       res_base         as for admit.lua
--       quota_count      q; quota...  per quota its periods' bounds, as for admit.lua
--       bucket_count     n
--       bucket...        per bucket: capacity, the tokens admit.lua took (its cost), old tk,
--                        old ts ("" = no key), new tk, new ts; all but capacity and cost ""
--                        when there is no snapshot
--       windows          after the buckets: count, the number of window keys, and the member
--                        admit.lua added to each ("<request_id>:<attempt>"), removed here
--                        (lib_window.lua; the members admit.lua pruned had left the window and
--                        are not put back)
--       pruned...        to the end: the expired leases admit.lua pruned (none without a
--                        concurrency gate or a snapshot), as member, score
--
-- Returns 1 when the attempt had run and was refunded, 0 when it had not (now cancelled).

-- @include lib_quota.lua
-- @include lib_reservation.lua
-- @include lib_bucket.lua
-- @include lib_window.lua

local t = redis.call('TIME')
local sec = tonumber(t[1])
local now_ms = sec * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[A_RESERVATION_TTL])
local rid = ARGV[A_REQUEST_ID]
local cur_key, prev_key, next_key, cur_expire, w = res_windows(ttl, sec)
if not (cur_key and prev_key and next_key) then
  return redis.error_reply(string.format(clock_error, sec))
end
local key, _, attempt, reserved, created, charged =
    res_find(cur_key, prev_key, w, rid, ttl, now_ms)
local fresh = ARGV[A_FRESH] == '1'
if not key or attempt ~= (fresh and '-' or ARGV[A_ATTEMPT]) or charged then
  -- In this window and the next: admit.lua, which runs after this if at all, looks in the
  -- window of its own time only. An engine-generated id names its call: the field request_id
  -- itself says "x", written only where the field is absent (a reservation of the id in the
  -- window is live, as every reservation of the current window is, and the call answers
  -- "live reservation" there, nothing written, as it would cancelled).
  for _, k in ipairs({cur_key, next_key}) do
    if fresh then
      redis.call('HSETNX', k, rid, 'x')
    else
      redis.call('HSET', k, 'x:' .. ARGV[A_ATTEMPT], 1)
    end
  end
  redis.call('EXPIREAT', cur_key, cur_expire)
  redis.call('EXPIREAT', next_key, cur_expire + ttl)
  return 0
end

-- Each quota's period of the admission, checked before anything is written.
local nq = tonumber(ARGV[A_QUOTA_COUNT])
local qkeys = {}
for k = 1, nq do
  qkeys[k] = quota_period(k, math.floor(created / 1000))
  if reserved > 0 and qkeys[k] == nil then
    return redis.error_reply(string.format(clock_error, sec))
  end
end

local ab = A_QUOTA + nq * A_QUOTA_STRIDE
local n = tonumber(ARGV[A_BUCKET_COUNT])
for i = 1, n do
  local a = ab + (i - 1) * A_BUCKET_STRIDE
  local cap = tonumber(ARGV[a + A_BUCKET_CAPACITY])
  local cost = tonumber(ARGV[a + A_BUCKET_COST])
  local old_tk, old_ts = ARGV[a + A_BUCKET_OLD_TK], ARGV[a + A_BUCKET_OLD_TS]
  local new_tk, new_ts = ARGV[a + A_BUCKET_NEW_TK], ARGV[a + A_BUCKET_NEW_TS]
  bucket_untake(KEYS[K_QUOTA + nq * K_QUOTA_STRIDE + i - 1], cap, cost, old_tk, old_ts, new_tk,
                new_ts)
end

local ws = ab + n * A_BUCKET_STRIDE
for j = 1, tonumber(ARGV[ws + A_WINDOWS_COUNT]) do
  window_untake(KEYS[K_QUOTA + nq * K_QUOTA_STRIDE + n + j - 1], ARGV[ws + A_WINDOWS_MEMBER])
end

-- Put the pruned leases back before removing ours, so the set (and its TTL) never vanishes.
for p = ws + A_WINDOWS_STRIDE, #ARGV, A_PRUNED_STRIDE do
  redis.call('ZADD', KEYS[K_LEASES], ARGV[p + A_PRUNED_SCORE], ARGV[p + A_PRUNED_MEMBER])
end
redis.call('ZREM', KEYS[K_LEASES], rid)

if reserved > 0 then
  local existed = ARGV[A_QUOTA_EXISTED]
  for k = 1, nq do
    local qkey = qkeys[k]
    if qkey then
      local v = redis.call('DECRBY', qkey, reserved)
      if v == 0 and string.sub(existed, k, k) == '0' then redis.call('DEL', qkey) end
    end
  end
end
-- The window is as before when this was its only reservation.
if redis.call('HINCRBY', key, '#', -1) == 0 and redis.call('HLEN', key) == 2 then
  redis.call('DEL', key)
else
  redis.call('HDEL', key, rid)
end
return 1
