-- gates.lua: the global gates (model and tool token buckets, shared by every tenant).
--
-- Called only when a request names a model or tool that has a configured gate, after admit.lua
-- admitted the tenant-scoped part; when this refuses, the engine runs refund.lua. All-or-nothing
-- across the buckets given: a refusal writes nothing. Same bucket math as admit.lua.
--
-- The keys ("dg:{g:model:<name>}:tb", "dg:{g:tool:<name>}:tb") carry their own hash tags, so on
-- Redis Cluster they may live in different slots; this engine targets single-node Redis (or a
-- proxy that routes per call) and passes both in one call to keep admission at two round trips.
--
-- KEYS[1..n]  bucket hashes (fields tk, ts as in admit.lua)
-- ARGV[1]     n
-- ARGV[2+3(i-1) ..]  per bucket i: gate name, capacity, refill per second
--
-- Returns {code, gate, retry_after_ms, tokens_1 .. tokens_n}: code 1 admitted, 0 refused by
-- gate (the one with the longest wait); tokens_i as strings, after the decision.

local t = redis.call('TIME')
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
local n = tonumber(ARGV[1])

local refused, retry = '', 0
local cur = {}
for i = 1, n do
  local a = 2 + (i - 1) * 3
  local cap = tonumber(ARGV[a + 1])
  local rate = tonumber(ARGV[a + 2])
  local b = redis.call('HMGET', KEYS[i], 'tk', 'ts')
  local tk, ts = tonumber(b[1]), tonumber(b[2])
  local c = cap
  if tk and ts then
    local elapsed = (now_us - ts) / 1e6
    if elapsed < 0 then elapsed = 0 end
    c = math.min(cap, tk + elapsed * rate)
  end
  cur[i] = c
  if c < 1 then
    local ms = 86400000
    if rate > 0 then ms = math.ceil((1 - c) / rate * 1000) end
    if refused == '' or ms > retry then refused, retry = ARGV[a], ms end
  end
end

local out = {0, refused, retry}
if refused ~= '' then
  for i = 1, n do out[3 + i] = string.format('%.17g', cur[i]) end
  return out
end

out[1] = 1
local now_ts = string.format('%d', now_us)
for i = 1, n do
  local a = 2 + (i - 1) * 3
  local cap, rate = tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2])
  local tk = string.format('%.17g', cur[i] - 1)
  out[3 + i] = tk
  redis.call('HSET', KEYS[i], 'tk', tk, 'ts', now_ts)
  local idle_s = 86400
  if rate > 0 then idle_s = math.ceil(cap / rate) + 1 end
  redis.call('EXPIRE', KEYS[i], idle_s)
end
return out
