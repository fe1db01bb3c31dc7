-- settle.lua: replaces a reservation with the actual token count, idempotently.
--
-- The first settle of a live reservation charges used += actual - reserved on each quota's
-- counter of the period the admission happened in (that of its creation time, lib_quota.lua)
-- and marks the reservation settled; later settles change nothing and say so. A quota whose
-- period of the admission is over and was before the previous one (a minute quota, settled
-- minutes later) is not corrected: that period has ended and its counter expired (or is about
-- to), and what it holds no longer gates anything. A reservation that expired (or never
-- existed) changes nothing either: its reserved amount stays charged. "reserved" is the estimate
-- plus the stream charges so far (charge.lua), so the settle's count is the stream's total. The
-- first settle also corrects the request's token-rate buckets by the same actual - reserved: a
-- refund up to the capacity, or an extra charge that may take a bucket below zero (the tokens
-- were used; the next requests wait), never a refusal after the fact. The model_tokens gate, in
-- its own slot, is corrected by correct_gates.lua.
--
-- @keys res_m2 res_m1 res_0 res_p1 res_p2 quota...(prev cur next) bucket...
-- @argv request_id reservation_ttl tokens res_base quota_count bucket_count
-- @argv quota...(prev_start start end next_end)
-- @argv bucket...(capacity refill warmup_s)
--
-- KEYS: res_m2 .. res_p2  the reservation windows around the gateway's (lib_reservation.lua)
--       quota...      per quota, the counters of the periods around the gateway's clock, as for
--                     admit.lua (lib_quota.lua)
--       bucket...     the request's token-rate buckets (tenant_tokens, user_tokens,
--                     api_key_tokens as the admission took them)
-- ARGV: request_id
--       reservation_ttl  the plan's reservation_ttl_s
--       tokens        the actual token count (integer >= 0)
--       res_base      as for admit.lua
--       quota_count   q; quota...  per quota its periods' bounds, as for admit.lua
--       bucket_count  n; bucket...  per bucket: capacity, refill per second, warmup_s
--
-- Fails with "ERR clock: ..." (nothing written) when Redis TIME, or the reservation's creation
-- time, lies outside (after) the declared periods or windows.
-- Returns {settled (1/0), detail ("settled" | "already_settled" | "expired"), charged,
-- used_1 .. used_q, tokens_1 .. tokens_n}: charged = tokens charged for this request after the
-- call, used_k = quota k's counter of the current period after it, tokens_i the buckets' levels
-- after it (strings; settled only).

-- @include lib_quota.lua
-- @include lib_reservation.lua
-- @include lib_bucket.lua

local t = redis.call('TIME')
local sec = tonumber(t[1])
local now_ms = sec * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[A_RESERVATION_TTL])
local rid = ARGV[A_REQUEST_ID]
local nq = tonumber(ARGV[A_QUOTA_COUNT])
local cur_key, prev_key, _, _, w = res_windows(ttl, sec)
if not (cur_key and prev_key) then return redis.error_reply(string.format(clock_error, sec)) end
-- Each quota's counter now: what the reply reports.
local now_keys = {}
for k = 1, nq do
  now_keys[k] = quota_period(k, sec)
  if not now_keys[k] then return redis.error_reply(string.format(clock_error, sec)) end
end
local function counts(out)
  for k = 1, nq do out[3 + k] = tonumber(redis.call('GET', now_keys[k]) or '0') end
  return out
end
local key, v, _, reserved, created, charged =
    res_find(cur_key, prev_key, w, rid, ttl, now_ms)
if not key then return counts({0, 'expired', 0}) end
if charged then return counts({0, 'already_settled', charged}) end

-- Each quota's period of the admission, all checked before anything is written.
local created_s = math.floor(created / 1000)
local periods = {}
for k = 1, nq do
  local qkey, from, to = quota_period(k, created_s)
  if qkey == nil then return redis.error_reply(string.format(clock_error, sec)) end
  periods[3 * k - 2], periods[3 * k - 1], periods[3 * k] = qkey, from, to
end

local actual = tonumber(ARGV[A_TOKENS])
local delta = actual - reserved
if delta ~= 0 then
  for k = 1, nq do
    local qkey = periods[3 * k - 2]
    if qkey then
      redis.call('INCRBY', qkey, delta)
      quota_expire(qkey, periods[3 * k - 1], periods[3 * k])
    end
  end
end
redis.call('HSET', key, rid, v .. ' ' .. ARGV[A_TOKENS])
redis.call('HINCRBY', key, '#', -1)
local out = counts({1, 'settled', actual})
local ts = bucket_now_text(t)
local now_us = sec * 1000000 + tonumber(t[2])
local ab = A_QUOTA + nq * A_QUOTA_STRIDE
for i = 1, tonumber(ARGV[A_BUCKET_COUNT]) do
  local a = ab + (i - 1) * A_BUCKET_STRIDE
  out[3 + nq + i] = bucket_correct(KEYS[K_QUOTA + nq * K_QUOTA_STRIDE + i - 1],
                                   tonumber(ARGV[a + A_BUCKET_CAPACITY]),
                                   tonumber(ARGV[a + A_BUCKET_REFILL]),
                                   tonumber(ARGV[a + A_BUCKET_WARMUP_S]), now_us, sec, ts, delta)
end
return out
