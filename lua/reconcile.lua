-- reconcile.lua: charges one decision made while Redis did not answer (redis.on_failure: local)
-- to Redis, once: the record's id goes into a set of applied ids in the same slot, and a call
-- for an id already there changes nothing (a daemon that crashed while reconciling sends its
-- records again after its restart).
--
-- @keys applied quota bucket...
-- @argv record_id applied_ttl month_end tokens bucket...(capacity refill)
--
-- KEYS: applied       set "dg:{t:<tenant>}:applied" (or "dg:{g:<kind>:<name>}:applied"): the
--                     record ids charged here
--       quota         "dg:{t:<tenant>}:q:YYYY-MM", the counter of the decision's month (the
--                     gateway's clock when it was made); a global gate's record charges no
--                     tokens and passes its applied set here
--       bucket...     the bucket hashes to take one token from each (lib_bucket.lua)
-- ARGV: record_id     "<journal id>:<sequence>", unique per decision
--       applied_ttl   seconds the applied set is kept after its last change
--       month_end     the next month's first second (unix s), for the counter's expiry
--       tokens        added to the month's counter (may be negative: a settle below the estimate)
--       bucket...     per bucket: capacity, refill per second (the full limits, not a share)
--
-- Returns 1 when charged now, 0 when the record had been charged before. A bucket is debited
-- down to empty, never below: the local share already bounded what was admitted.

-- @include lib_bucket.lua

local t = redis.call('TIME')
if redis.call('SADD', KEYS[K_APPLIED], ARGV[A_RECORD_ID]) == 0 then return 0 end
redis.call('EXPIRE', KEYS[K_APPLIED], tonumber(ARGV[A_APPLIED_TTL]))

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
for i = 1, #KEYS - K_BUCKET + 1 do
  local a = A_BUCKET + (i - 1) * A_BUCKET_STRIDE
  -- Warm-up 0: a local decision was bounded by the daemon's share already; no ramp here.
  local b = bucket_read(KEYS[K_BUCKET + i - 1], tonumber(ARGV[a + A_BUCKET_CAPACITY]),
                        tonumber(ARGV[a + A_BUCKET_REFILL]), 0, now_us)
  if b.cur < 1 then b.cur = 1 end
  bucket_take(b, sec, ts, 1)
end
return 1
