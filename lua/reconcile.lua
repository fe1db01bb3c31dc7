-- reconcile.lua: charges decisions made while Redis did not answer (redis.on_failure: local) to
-- Redis, each once: a batch of one journal's records whose parts lie in one slot (one tenant's,
-- or one global gate's), in sequence order. A record's sequence goes into its journal's set of
-- applied sequences in the same slot, and a record already there, or at or below the set's
-- watermark, changes nothing (a daemon that crashed while reconciling sends its records again
-- after its restart). The watermark the daemon sends (every record of its journal up to it is
-- in Redis) trims the set: it holds only the sequences above it, so it does not grow with the
-- length of an outage. One call for many records: a drain costs Redis one command, one TIME and
-- one applied-set update per batch, not per record.
--
-- @keys applied key...
-- @argv watermark applied_ttl record_count record...(seq month_end tokens exact bucket_count)
-- @argv bucket...(capacity refill cost)
--
-- KEYS: applied       sorted set "dg:{t:<tenant>}:applied:<journal id>" (or
--                     "dg:{g:<kind>:<name>}:applied:<journal id>"): the journal's sequences
--                     charged here (score = sequence), and member "w" scored by the watermark
--       key...        per record: its quota counter, "dg:{t:<tenant>}:q:YYYY-MM" of the
--                     decision's month (the gateway's clock when it was made; a global gate's
--                     record charges no tokens and passes its applied set here), then the
--                     bucket hashes the decision went through (lib_bucket.lua)
-- ARGV: watermark     every record of the journal up to this sequence is in Redis
--       applied_ttl   seconds the applied set is kept after its last change
--       record_count  n; record... per record, in sequence order:
--         seq           its sequence in its journal, unique per decision
--         month_end     the next month's first second (unix s), for the counter's expiry
--         tokens        added to the month's counter (may be negative: a settle below the
--                       estimate)
--         exact         0: an admission; 1: a correction (a local settle or stream charge)
--         bucket_count  how many of the buckets below (and keys above) are the record's
--       bucket...     per bucket of each record in turn: capacity, refill per second (the full
--                     limits, not a share) and cost: what the local decision took (1 for a
--                     request gate, the estimate for a token-rate gate, 0 for a shadow bucket
--                     that had nothing to give); for a correction the delta (actual - reserved,
--                     or a charge's tokens)
--
-- Returns how many records were charged now (the others had been before). An admission debits a
-- bucket by its cost down to empty, never below (the local share already bounded what was
-- admitted; a bucket already below zero stays where it is); a correction applies its delta as
-- settle.lua does: a refund up to the capacity, an extra charge possibly below zero.

-- @include lib_bucket.lua

local t = redis.call('TIME')
local sec = tonumber(t[1])
local now_us = sec * 1000000 + tonumber(t[2])
local ts = bucket_now_text(t)
local akey = KEYS[K_APPLIED]
local w = tonumber(redis.call('ZSCORE', akey, 'w') or 0)
local n = tonumber(ARGV[A_RECORD_COUNT])
local k = 0  -- KEYS[K_KEY + k]: the record's quota key, its bucket keys after it
local b = A_RECORD + n * A_RECORD_STRIDE  -- the record's first bucket group
local added = {}
for i = 1, n do
  local r = A_RECORD + (i - 1) * A_RECORD_STRIDE
  local seq, nb = ARGV[r + A_RECORD_SEQ], tonumber(ARGV[r + A_RECORD_BUCKET_COUNT])
  if tonumber(seq) > w and not redis.call('ZSCORE', akey, seq) then
    added[#added + 1] = seq
    added[#added + 1] = seq
    local tokens = tonumber(ARGV[r + A_RECORD_TOKENS])
    if tokens ~= 0 then
      local qkey = KEYS[K_KEY + k]
      redis.call('INCRBY', qkey, tokens)
      if redis.call('TTL', qkey) == -1 then
        redis.call('EXPIREAT', qkey, tonumber(ARGV[r + A_RECORD_MONTH_END]) + 32 * 86400)
      end
    end
    local exact = ARGV[r + A_RECORD_EXACT] == '1'
    for j = 1, nb do
      local a = b + (j - 1) * A_BUCKET_STRIDE
      -- Warm-up 0: a local decision was bounded by the daemon's share already; no ramp here (a
      -- bucket's creation stamp, if any, is kept).
      local key, cap = KEYS[K_KEY + k + j], tonumber(ARGV[a + A_BUCKET_CAPACITY])
      local rate, cost = tonumber(ARGV[a + A_BUCKET_REFILL]), tonumber(ARGV[a + A_BUCKET_COST])
      if exact then
        bucket_correct(key, cap, rate, 0, now_us, sec, ts, cost)
      else
        local bk = bucket_read(key, cap, rate, 0, now_us)
        bucket_take(bk, sec, ts, math.min(cost, math.max(bk[5], 0)))
      end
    end
  end
  k = k + 1 + nb
  b = b + nb * A_BUCKET_STRIDE
end
-- Trimmed after the records were looked up (a record's sequence is above the watermark sent
-- with it: every record up to it was in Redis already).
local nw = tonumber(ARGV[A_WATERMARK])
if nw > w then
  redis.call('ZREMRANGEBYSCORE', akey, '-inf', nw)
  redis.call('ZADD', akey, nw, 'w')
end
if #added > 0 then
  -- Scores and members alike: the sequences (ZADD's arguments are score member pairs).
  redis.call('ZADD', akey, unpack(added))
end
if #added > 0 or nw > w then redis.call('EXPIRE', akey, tonumber(ARGV[A_APPLIED_TTL])) end
return #added / 2
