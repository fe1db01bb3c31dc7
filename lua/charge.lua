-- charge.lua: one charge of a stream: the tokens a request used since its last charge, sent by a
-- streaming proxy every N tokens, in the tenant's hash slot.
--
-- The request's live reservation takes the tokens on top of what it holds (its "reserved" field
-- is the estimate plus the charges so far, so that settle.lua's actual - reserved subtracts what
-- the admission and the charges already took), the quota counter of the admission's month and
-- the request's token-rate buckets take them too (a bucket may go below zero: the tokens were
-- used; the next requests wait), and the request's lease, while live, is renewed for lease_s
-- from now, so a stream longer than lease_s keeps it as long as it charges. The quotas take them
-- in the periods of the admission, as settle.lua corrects them (a quota whose period of the
-- admission was before the previous one takes nothing: settle.lua would not correct it either).
-- Nothing refuses: the tokens were used, so they are recorded even on the charge that crosses a
-- budget, which the engine tells from the reply's quota counters (answered 429, reason quota,
-- for the proxy to cut the stream). A settled or unknown (expired, never admitted) reservation
-- changes nothing.
--
-- @keys res_m2 res_m1 res_0 res_p1 res_p2 leases quota...(prev cur next) bucket...
-- @argv request_id reservation_ttl tokens lease_s res_base deadline quota_count bucket_count
-- @argv quota...(prev_start start end next_end)
-- @argv bucket...(capacity refill warmup_s)
--
-- KEYS: res_m2 .. res_p2, quota...  as for settle.lua
--       leases        zset "dg:{t:<tenant>}:leases"
--       bucket...     the request's token-rate buckets
-- ARGV: request_id, reservation_ttl
--       tokens        used since the last charge (integer >= 0)
--       lease_s       the plan's lease length (s)
--       res_base, deadline: as for admit.lua (a charge run past its deadline was answered
--                     failed, and the proxy sends it again: adding it then would count its
--                     tokens twice)
--       quota_count   q; quota...  as for settle.lua
--       bucket_count  n; bucket...  per bucket: capacity, refill per second, warmup_s
--
-- Fails with "ERR clock: ..." (nothing written) as settle.lua does. Returns {code,
-- lease_left_ms, reserved, used_1, left_s_1 .. used_q, left_s_q, tokens_1 .. tokens_n}: code 1
-- charged, 0 no live reservation (nothing written), 2 already settled (nothing written), 3 past
-- its deadline (nothing read or written: a failure, not a refusal); lease_left_ms = the renewed
-- lease's time left, -1 when the request holds no live lease; reserved = what the request has
-- been charged so far; used_k = quota k's counter of the current period after the charge and
-- left_s_k the seconds left of that period; tokens_i = bucket levels.

-- @include lib_quota.lua
-- @include lib_reservation.lua
-- @include lib_bucket.lua

local t = redis.call('TIME')
local sec = tonumber(t[1])
local now_us = sec * 1000000 + tonumber(t[2])
local now_ms = math.floor(now_us / 1000)
if now_ms > tonumber(ARGV[A_DEADLINE]) then return {3} end
local ttl = tonumber(ARGV[A_RESERVATION_TTL])
local rid = ARGV[A_REQUEST_ID]
local nq = tonumber(ARGV[A_QUOTA_COUNT])
local cur_key, prev_key, _, _, w = res_windows(ttl, sec)
if not (cur_key and prev_key) then return redis.error_reply(string.format(clock_error, sec)) end
-- Per quota k, at 5k-4 .. 5k: the counter now, its period's end, the counter of the admission's
-- period (false: over), that period's bounds.
local q = {}
for k = 1, nq do
  local qkey, _, to = quota_period(k, sec)
  if not qkey then return redis.error_reply(string.format(clock_error, sec)) end
  q[5 * k - 4], q[5 * k - 3] = qkey, to
end
local key, v, _, reserved, created, charged = res_find(cur_key, prev_key, w, rid, ttl, now_ms)
if not key then return {0} end
if charged then return {2} end
local created_s = math.floor(created / 1000)
for k = 1, nq do
  local qkey, from, to = quota_period(k, created_s)
  if qkey == nil then return redis.error_reply(string.format(clock_error, sec)) end
  q[5 * k - 2], q[5 * k - 1], q[5 * k] = qkey, from, to
end

local tokens = tonumber(ARGV[A_TOKENS])
reserved = reserved + tokens
-- The value keeps its attempt and creation time as written (the latter relative to its window).
local attempt, created_text = string.match(v, '^(%S+) %S+ (%S+)$')
redis.call('HSET', key, rid, attempt .. ' ' .. string.format('%d', reserved) .. ' ' .. created_text)
if tokens > 0 then
  for k = 1, nq do
    local qkey = q[5 * k - 2]
    if qkey then
      redis.call('INCRBY', qkey, ARGV[A_TOKENS])
      quota_expire(qkey, q[5 * k - 1], q[5 * k])
    end
  end
end

local lease_left = -1
local deadline = redis.call('ZSCORE', KEYS[K_LEASES], rid)
if deadline and tonumber(deadline) > now_ms then
  local lease_ms = tonumber(ARGV[A_LEASE_S]) * 1000
  redis.call('ZADD', KEYS[K_LEASES], now_ms + lease_ms, rid)
  if redis.call('PTTL', KEYS[K_LEASES]) < lease_ms + 1000 then
    redis.call('PEXPIRE', KEYS[K_LEASES], lease_ms + 1000)
  end
  lease_left = lease_ms
end

local out = {1, lease_left, reserved}
for k = 1, nq do
  out[2 + 2 * k] = tonumber(redis.call('GET', q[5 * k - 4]) or '0')
  out[3 + 2 * k] = q[5 * k - 3] - sec
end
local ts = bucket_now_text(t)
local ab = A_QUOTA + nq * A_QUOTA_STRIDE
for i = 1, tonumber(ARGV[A_BUCKET_COUNT]) do
  local a = ab + (i - 1) * A_BUCKET_STRIDE
  local b = bucket_read(KEYS[K_QUOTA + nq * K_QUOTA_STRIDE + i - 1],
                        tonumber(ARGV[a + A_BUCKET_CAPACITY]), tonumber(ARGV[a + A_BUCKET_REFILL]),
                        tonumber(ARGV[a + A_BUCKET_WARMUP_S]), now_us)
  out[3 + 2 * nq + i] = bucket_take(b, sec, ts, tokens)
end
return out
