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
-- @argv watermark applied_ttl record_count
-- @argv record...(seq tokens exact quota_count bucket_count) quota...(expire_at)
-- @argv bucket...(capacity refill cost)
--
-- KEYS: applied       sorted set "dg:{t:<tenant>}:applied:<journal id>" (or
--                     "dg:{g:<kind>:<name>}:applied:<journal id>"): the journal's sequences
--                     charged here (score = sequence), and member "w" scored by the watermark
--       key...        per record: its quota counters, "dg:{t:<tenant>}:q:<period>" of each
--                     quota's period of the decision (the gateway's clock when it was made; a
--                     global gate's record has none), then the bucket hashes the decision went
--                     through (lib_bucket.lua)
-- ARGV: watermark     every record of the journal up to this sequence is in Redis
--       applied_ttl   seconds the applied set is kept after its last change
--       record_count  n; record... per record, in sequence order:
--         seq           its sequence in its journal, unique per decision
--         tokens        added to each quota counter (may be negative: a settle below the
--                       estimate)
--         exact         0: an admission; 1: a correction (a local settle or stream charge)
--         quota_count   how many of the quota groups below (and keys above) are the record's
--         bucket_count  how many of the buckets below (and keys above) are the record's
--       quota...      per quota counter of each record in turn: expire_at, the counter's expiry
--                     (unix s: one period after its period's end, as the scripts set it)
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
local k = 0  -- KEYS[K_KEY + k]: the record's quota keys, its bucket keys after them
local qa = A_RECORD + n * A_RECORD_STRIDE  -- the record's first quota group
local nqs = 0
for i = 1, n do
  nqs = nqs + tonumber(ARGV[A_RECORD + (i - 1) * A_RECORD_STRIDE + A_RECORD_QUOTA_COUNT])
end
local b = qa + nqs * A_QUOTA_STRIDE  -- the record's first bucket group
local added = {}
for i = 1, n do
  local r = A_RECORD + (i - 1) * A_RECORD_STRIDE
  local seq, nb = ARGV[r + A_RECORD_SEQ], tonumber(ARGV[r + A_RECORD_BUCKET_COUNT])
  local nq = tonumber(ARGV[r + A_RECORD_QUOTA_COUNT])
  if tonumber(seq) > w and not redis.call('ZSCORE', akey, seq) then
    added[#added + 1] = seq
    added[#added + 1] = seq
    local tokens = tonumber(ARGV[r + A_RECORD_TOKENS])
    for q = 1, tokens ~= 0 and nq or 0 do
      local qkey = KEYS[K_KEY + k + q - 1]
      redis.call('INCRBY', qkey, tokens)
      if redis.call('TTL', qkey) == -1 then
        local expire_at = ARGV[qa + (q - 1) * A_QUOTA_STRIDE + A_QUOTA_EXPIRE_AT]
        redis.call('EXPIREAT', qkey, tonumber(expire_at))
      end
    end
    local exact = ARGV[r + A_RECORD_EXACT] == '1'
    for j = 1, nb do
      local a = b + (j - 1) * A_BUCKET_STRIDE
      -- Warm-up 0: a local decision was bounded by the daemon's share already; no ramp here (a
      -- bucket's creation stamp, if any, is kept).
      local key, cap = KEYS[K_KEY + k + nq + j - 1], tonumber(ARGV[a + A_BUCKET_CAPACITY])
      local rate, cost = tonumber(ARGV[a + A_BUCKET_REFILL]), tonumber(ARGV[a + A_BUCKET_COST])
      if exact then
        bucket_correct(key, cap, rate, 0, now_us, sec, ts, cost)
      else
        local bk = bucket_read(key, cap, rate, 0, now_us)
        bucket_take(bk, sec, ts, math.min(cost, math.max(bk[5], 0)))
      end
    end
  end
  k = k + nq + nb
  qa = qa + nq * A_QUOTA_STRIDE
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
