-- correct_gates.lua: the model_tokens gate's part of a settle or a stream charge, in the gate's
-- own hash slot (beside settle.lua or charge.lua in the tenant's, sent at the same time).
--
-- gates.lua left a taken record with the tokens the request took from the bucket (its
-- estimate). A charge ("final" 0) takes `tokens` more and adds them to the record; a settle
-- ("final" 1) takes tokens - taken (a refund when the count is below what was taken, up to the
-- capacity; an extra charge that may take the bucket below zero when above: the tokens were
-- used, so the next requests wait) and deletes the record, so that a settle sent again corrects
-- nothing twice and a charge after the settle changes nothing. No record (never taken, undone,
-- settled, or past the plan's reservation_ttl_s): nothing written.
--
-- @keys taken bucket...
-- @argv tokens final deadline bucket_count bucket...(capacity refill warmup_s)
--
-- KEYS: taken      "dg:{g:model_tokens:<name>}:s:<request_id>"
--       bucket...  the bucket hashes (lib_bucket.lua)
-- ARGV: tokens     a charge: used since the last charge; a settle: the request's total
--       final      "1": a settle; "0": a charge
--       deadline   unix ms on Redis's clock past which the gateway has answered the call failed
--                  (a charge's; a settle, which is safe to run again, gives none): a charge run
--                  later would take its tokens twice, as the proxy sends it again
--       bucket_count  n; bucket...  per bucket: capacity, refill per second, warmup_s
--
-- Returns {code, delta, tokens_1 .. tokens_n}: code 1 corrected by delta tokens taken (negative:
-- given back), 0 no record (nothing written), 3 past its deadline (nothing read or written: a
-- failure); tokens_i as strings.

-- @include lib_bucket.lua

local t = redis.call('TIME')
local sec = tonumber(t[1])
local now_us = sec * 1000000 + tonumber(t[2])
if math.floor(now_us / 1000) > tonumber(ARGV[A_DEADLINE]) then return {3, 0} end
local taken = tonumber(redis.call('GET', KEYS[K_TAKEN]))
if not taken then return {0, 0} end
local tokens = tonumber(ARGV[A_TOKENS])
local delta = tokens
if ARGV[A_FINAL] == '1' then
  delta = tokens - taken
  redis.call('DEL', KEYS[K_TAKEN])
else
  redis.call('SET', KEYS[K_TAKEN], string.format('%d', taken + tokens), 'KEEPTTL')
end

local ts = bucket_now_text(t)
local out = {1, delta}
for i = 1, tonumber(ARGV[A_BUCKET_COUNT]) do
  local a = A_BUCKET + (i - 1) * A_BUCKET_STRIDE
  out[2 + i] = bucket_correct(KEYS[K_BUCKET + i - 1], tonumber(ARGV[a + A_BUCKET_CAPACITY]),
                              tonumber(ARGV[a + A_BUCKET_REFILL]),
                              tonumber(ARGV[a + A_BUCKET_WARMUP_S]), now_us, sec, ts, delta)
end
return out
