-- gates.lua: the global gates (model and tool token buckets, shared by every tenant).
--
-- Called only when a request names a model or tool that has a configured gate, after admit.lua
-- admitted the tenant-scoped part; when this refuses, the engine runs refund.lua. All-or-nothing
-- across the buckets given: a refusal writes nothing. Same bucket math as admit.lua
-- (lib_bucket.lua).
--
-- The keys ("dg:{g:model:<name>}:tb", "dg:{g:tool:<name>}:tb") carry their own hash tags, so on
-- Redis Cluster they may live in different slots; this engine targets single-node Redis (or a
-- proxy that routes per call) and passes both in one call to keep admission at two round trips.
--
-- @keys bucket...
-- @argv bucket_count bucket...(gate capacity refill)
--
-- KEYS: bucket...  the bucket hashes (fields tk, ts as in admit.lua)
-- ARGV: bucket_count n; bucket...  per bucket: gate name, capacity, refill per second
--
-- Returns {code, gate, retry_after_ms, tokens_1 .. tokens_n}: code 1 admitted, 0 refused by
-- gate (the one with the longest wait); tokens_i as strings, after the decision.

local t = redis.call('TIME')
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
local n = tonumber(ARGV[A_BUCKET_COUNT])

-- @include lib_bucket.lua
local refused, retry = '', 0
local cur = {}
for i = 1, n do
  local a = A_BUCKET + (i - 1) * A_BUCKET_STRIDE
  local cap = tonumber(ARGV[a + A_BUCKET_CAPACITY])
  local rate = tonumber(ARGV[a + A_BUCKET_REFILL])
  cur[i] = bucket_read(KEYS[K_BUCKET + i - 1], cap, rate, now_us)
  if cur[i] < 1 then
    local ms = bucket_wait_ms(cur[i], rate)
    if refused == '' or ms > retry then refused, retry = ARGV[a + A_BUCKET_GATE], ms end
  end
end

local out = {0, refused, retry}
if refused ~= '' then
  for i = 1, n do out[3 + i] = string.format('%.17g', cur[i]) end
  return out
end

out[1] = 1
for i = 1, n do
  local a = A_BUCKET + (i - 1) * A_BUCKET_STRIDE
  local cap, rate = tonumber(ARGV[a + A_BUCKET_CAPACITY]), tonumber(ARGV[a + A_BUCKET_REFILL])
  out[3 + i] = bucket_take(KEYS[K_BUCKET + i - 1], cur[i], cap, rate, now_us)
end
return out
