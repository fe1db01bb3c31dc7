-- charge.lua: one charge of a stream: the tokens a request used since its last charge, sent by a
-- streaming proxy every N tokens, in the tenant's hash slot.
--
-- The request's live reservation takes the tokens on top of what it holds (its "reserved" field
-- is the estimate plus the charges so far, so that settle.lua's actual - reserved subtracts what
-- the admission and the charges already took), the quota counter of the admission's month and
-- the request's token-rate buckets take them too (a bucket may go below zero: the tokens were
-- used; the next requests wait), and the request's lease, while live, is renewed for lease_s
-- from now, so a stream longer than lease_s keeps it as long as it charges. Nothing refuses:
-- the tokens were used, so they are recorded even on the charge that crosses the month's budget,
-- which the engine tells from the reply's quota counter (answered 429, reason quota, for the
-- proxy to cut the stream). A settled or unknown (expired, never admitted) reservation changes nothing.
--
-- @keys quota_prev quota_cur quota_next res_m2 res_m1 res_0 res_p1 res_p2 leases bucket...
-- @argv request_id reservation_ttl tokens lease_s prev_start month_start month_end next_end
-- @argv res_base deadline
-- @argv bucket_count
-- @argv bucket...(capacity refill warmup_s)
--
-- KEYS: quota_prev .. res_p2  as for settle.lua
--       leases        zset "dg:{t:<tenant>}:leases"
--       bucket...     the request's token-rate buckets
-- ARGV: request_id, reservation_ttl
--       tokens        used since the last charge (integer >= 0)
--       lease_s       the plan's lease length (s)
--       prev_start .. next_end, res_base, deadline: as for admit.lua (a charge run past its
--                     deadline was answered failed, and the proxy sends it again: adding it
--                     then would count its tokens twice)
--       bucket_count  n; bucket...  per bucket: capacity, refill per second, warmup_s
--
-- Fails with "ERR clock: ..." (nothing written) as settle.lua does. Returns {code, used,
-- month_left_s, lease_left_ms, reserved, tokens_1 .. tokens_n}: code 1 charged, 0 no live
-- reservation (nothing written), 2 already settled (nothing written), 3 past its deadline
-- (nothing read or written: a failure, not a refusal); used = the quota counter
-- after the charge; lease_left_ms = the renewed lease's time left, -1 when the request holds no
-- live lease; reserved = what the request has been charged so far; tokens_i = bucket levels.

-- @include lib_month.lua
-- @include lib_reservation.lua
-- @include lib_bucket.lua

local t = redis.call('TIME')
local sec = tonumber(t[1])
local now_us = sec * 1000000 + tonumber(t[2])
local now_ms = math.floor(now_us / 1000)
if now_ms > tonumber(ARGV[A_DEADLINE]) then return {3} end
local ttl = tonumber(ARGV[A_RESERVATION_TTL])
local rid = ARGV[A_REQUEST_ID]
local cur_key, prev_key, _, _, w = res_windows(ttl, sec)
if not (cur_key and prev_key and quota_month(sec)) then
  return redis.error_reply(string.format(clock_error, sec))
end
local key, v, _, reserved, created, charged = res_find(cur_key, prev_key, w, rid, ttl, now_ms)
if not key then return {0} end
if charged then return {2} end
local qkey, _, next_month = quota_month(math.floor(created / 1000))
if not qkey then
  return redis.error_reply(string.format(clock_error, sec))
end

local tokens = tonumber(ARGV[A_TOKENS])
reserved = reserved + tokens
-- The value keeps its attempt and creation time as written (the latter relative to its window).
local attempt, created_text = string.match(v, '^(%S+) %S+ (%S+)$')
redis.call('HSET', key, rid, attempt .. ' ' .. string.format('%d', reserved) .. ' ' .. created_text)
local used
if tokens > 0 then
  used = redis.call('INCRBY', qkey, ARGV[A_TOKENS])
  if redis.call('TTL', qkey) == -1 then redis.call('EXPIREAT', qkey, next_month + 32 * 86400) end
else
  used = tonumber(redis.call('GET', qkey) or '0')
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

local out = {1, used, next_month - sec, lease_left, reserved}
local ts = bucket_now_text(t)
for i = 1, tonumber(ARGV[A_BUCKET_COUNT]) do
  local a = A_BUCKET + (i - 1) * A_BUCKET_STRIDE
  local b = bucket_read(KEYS[K_BUCKET + i - 1], tonumber(ARGV[a + A_BUCKET_CAPACITY]),
                        tonumber(ARGV[a + A_BUCKET_REFILL]), tonumber(ARGV[a + A_BUCKET_WARMUP_S]),
                        now_us)
  out[5 + i] = bucket_take(b, sec, ts, tokens)
end
return out
