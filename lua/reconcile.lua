-- reconcile.lua: charges one decision made while Redis did not answer (redis.on_failure: local)
-- to Redis, once: the record's sequence goes into its journal's set of applied sequences in the
-- same slot, and a call for one already there, or at or below the set's watermark, changes
-- nothing (a daemon that crashed while reconciling sends its records again after its restart).
-- The watermark the daemon sends (every record of its journal up to it is in Redis) trims the
-- set: it holds only the sequences above it, so it does not grow with the length of an outage.
--
-- @keys applied quota bucket...
-- @argv seq watermark applied_ttl month_end tokens exact bucket...(capacity refill cost)
--
-- KEYS: applied       sorted set "dg:{t:<tenant>}:applied:<journal id>" (or
--                     "dg:{g:<kind>:<name>}:applied:<journal id>"): the journal's sequences
--                     charged here (score = sequence), and member "w" scored by the watermark
--       quota         "dg:{t:<tenant>}:q:YYYY-MM", the counter of the decision's month (the
--                     gateway's clock when it was made); a global gate's record charges no
--                     tokens and passes its applied set here
--       bucket...     the bucket hashes the decision went through (lib_bucket.lua)
-- ARGV: seq           the record's sequence in its journal, unique per decision
--       watermark     every record of the journal up to this sequence is in Redis
--       applied_ttl   seconds the applied set is kept after its last change
--       month_end     the next month's first second (unix s), for the counter's expiry
--       tokens        added to the month's counter (may be negative: a settle below the estimate)
--       exact         0: an admission; 1: a correction (a local settle or stream charge)
--       bucket...     per bucket: capacity, refill per second (the full limits, not a share) and
--                     cost: what the local decision took (1 for a request gate, the estimate for
--                     a token-rate gate, 0 for a shadow bucket that had nothing to give); for a
--                     correction the delta (actual - reserved, or a charge's tokens)
--
-- Returns 1 when charged now, 0 when the record had been charged before. An admission debits a
-- bucket by its cost down to empty, never below (the local share already bounded what was
-- admitted; a bucket already below zero stays where it is); a correction applies its delta as
-- settle.lua does: a refund up to the capacity, an extra charge possibly below zero.

-- @include lib_bucket.lua

local t = redis.call('TIME')
local akey, seq = KEYS[K_APPLIED], tonumber(ARGV[A_SEQ])
local w = tonumber(redis.call('ZSCORE', akey, 'w') or 0)
if seq <= w or redis.call('ZSCORE', akey, ARGV[A_SEQ]) then return 0 end
local nw = tonumber(ARGV[A_WATERMARK])
if nw > w then
  redis.call('ZREMRANGEBYSCORE', akey, '-inf', nw)
  redis.call('ZADD', akey, nw, 'w')
end
redis.call('ZADD', akey, seq, ARGV[A_SEQ])
redis.call('EXPIRE', akey, tonumber(ARGV[A_APPLIED_TTL]))

local tokens = tonumber(ARGV[A_TOKENS])
if tokens ~= 0 then
  local qkey = KEYS[K_QUOTA]
  redis.call('INCRBY', qkey, tokens)
  if redis.call('TTL', qkey) == -1 then
    redis.call('EXPIREAT', qkey, tonumber(ARGV[A_MONTH_END]) + 32 * 86400)
  end
end

local sec = tonumber(t[1])
local now_us = sec * 1000000 + tonumber(t[2])
local ts = bucket_now_text(t)
local exact = ARGV[A_EXACT] == '1'
for i = 1, #KEYS - K_BUCKET + 1 do
  local a = A_BUCKET + (i - 1) * A_BUCKET_STRIDE
  -- Warm-up 0: a local decision was bounded by the daemon's share already; no ramp here (a
  -- bucket's creation stamp, if any, is kept).
  local key, cap = KEYS[K_BUCKET + i - 1], tonumber(ARGV[a + A_BUCKET_CAPACITY])
  local rate, cost = tonumber(ARGV[a + A_BUCKET_REFILL]), tonumber(ARGV[a + A_BUCKET_COST])
  if exact then
    bucket_correct(key, cap, rate, 0, now_us, sec, ts, cost)
  else
    local b = bucket_read(key, cap, rate, 0, now_us)
    bucket_take(b, sec, ts, math.min(cost, math.max(b[5], 0)))
  end
end
return 1
