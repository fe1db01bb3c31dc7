-- settle.lua: replaces a reservation with the actual token count, idempotently.
--
-- The first settle of a live reservation charges used += actual - reserved on the quota key of
-- the month the admission happened in (that of its creation time) and marks the reservation
-- settled; later settles change nothing and say so. A reservation that expired (or never
-- existed) changes nothing either: its reserved amount stays charged. "reserved" is the estimate
-- plus the stream charges so far (charge.lua), so the settle's count is the stream's total. The
-- first settle also corrects the request's token-rate buckets by the same actual - reserved: a
-- refund up to the capacity, or an extra charge that may take a bucket below zero (the tokens
-- were used; the next requests wait), never a refusal after the fact. The model_tokens gate, in
-- its own slot, is corrected by correct_gates.lua.
--
-- @keys quota_prev quota_cur quota_next res_m2 res_m1 res_0 res_p1 res_p2 bucket...
-- @argv request_id reservation_ttl tokens prev_start month_start month_end next_end res_base
-- @argv bucket_count
-- @argv bucket...(capacity refill warmup_s)
--
-- KEYS: quota_prev, quota_cur, quota_next  the quota counters of the months around the
--                     gateway's clock, as for admit.lua (lib_month.lua)
--       res_m2 .. res_p2  the reservation windows around the gateway's (lib_reservation.lua)
--       bucket...     the request's token-rate buckets (tenant_tokens, user_tokens,
--                     api_key_tokens as the admission took them)
-- ARGV: request_id
--       reservation_ttl  the plan's reservation_ttl_s
--       tokens        the actual token count (integer >= 0)
--       prev_start .. next_end, res_base: as for admit.lua
--       bucket_count  n; bucket...  per bucket: capacity, refill per second, warmup_s
--
-- Fails with "ERR clock: ..." (nothing written) when Redis TIME, or the reservation's creation
-- time, lies outside the declared months or windows.
-- Returns {settled (1/0), detail ("settled" | "already_settled" | "expired"), charged, used,
-- tokens_1 .. tokens_n}: charged = tokens charged for this request after the call, used = the
-- quota counter after it, tokens_i the buckets' levels after it (strings; settled only).

-- @include lib_month.lua
-- @include lib_reservation.lua
-- @include lib_bucket.lua

local t = redis.call('TIME')
local sec = tonumber(t[1])
local now_ms = sec * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[A_RESERVATION_TTL])
local rid = ARGV[A_REQUEST_ID]
local cur_key, prev_key, _, _, w = res_windows(ttl, sec)
local now_qkey = quota_month(sec)
if not (cur_key and prev_key and now_qkey) then
  return redis.error_reply(string.format(clock_error, sec))
end
local key, v, _, reserved, created, charged =
    res_find(cur_key, prev_key, w, rid, ttl, now_ms)
if not key then
  return {0, 'expired', 0, tonumber(redis.call('GET', now_qkey) or '0')}
end

local qkey, _, next_month = quota_month(math.floor(created / 1000))
if not qkey then
  return redis.error_reply(string.format(clock_error, sec))
end
if charged then
  return {0, 'already_settled', charged, tonumber(redis.call('GET', qkey) or '0')}
end

local actual = tonumber(ARGV[A_TOKENS])
local delta = actual - reserved
local used
if delta ~= 0 then
  used = redis.call('INCRBY', qkey, delta)
  if redis.call('TTL', qkey) == -1 then redis.call('EXPIREAT', qkey, next_month + 32 * 86400) end
else
  used = tonumber(redis.call('GET', qkey) or '0')
end
redis.call('HSET', key, rid, v .. ' ' .. ARGV[A_TOKENS])
redis.call('HINCRBY', key, '#', -1)
local out = {1, 'settled', actual, used}
local ts = bucket_now_text(t)
local now_us = sec * 1000000 + tonumber(t[2])
for i = 1, tonumber(ARGV[A_BUCKET_COUNT]) do
  local a = A_BUCKET + (i - 1) * A_BUCKET_STRIDE
  out[4 + i] = bucket_correct(KEYS[K_BUCKET + i - 1], tonumber(ARGV[a + A_BUCKET_CAPACITY]),
                              tonumber(ARGV[a + A_BUCKET_REFILL]),
                              tonumber(ARGV[a + A_BUCKET_WARMUP_S]), now_us, sec, ts, delta)
end
return out
