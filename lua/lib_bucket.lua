-- lib_bucket.lua: the token-bucket math of admit.lua and gates.lua. Not a script of its own:
-- tools/embed.py puts this text in place of a `-- @include lib_bucket.lua` line of a script.
--
-- A bucket is a hash {tk = tokens, ts = last update in microseconds, ex = the key's expiry in unix
-- seconds}; a key never seen is a full bucket.

-- The level of the bucket at `key` at now_us: min(cap, tk + elapsed * rate). Also returns the
-- stored tk and ts as they were ('' when absent), for refund.lua to put back, and the stored
-- expiry (0 when absent), for bucket_take.
local function bucket_read(key, cap, rate, now_us)
  local b = redis.call('HMGET', key, 'tk', 'ts', 'ex')
  local tk, ts = tonumber(b[1]), tonumber(b[2])
  local cur = cap
  if tk and ts then
    local elapsed = (now_us - ts) / 1e6
    if elapsed < 0 then elapsed = 0 end
    cur = math.min(cap, tk + elapsed * rate)
  end
  return cur, b[1] or '', b[2] or '', tonumber(b[3]) or 0
end

-- Milliseconds until a bucket at level `cur` holds a whole token; a day when it never refills.
local function bucket_wait_ms(cur, rate)
  if rate > 0 then return math.ceil((1 - cur) / rate * 1000) end
  return 86400000
end

-- Takes one token from the bucket at `key`, at level `cur`, whose key expires at `ex` (from
-- bucket_read); returns tk and ts as stored (strings: Lua numbers would be truncated to integers
-- on the way out of a script). An idle bucket goes away: the key lives at least until the bucket
-- would be full again (idle_s) and at most a quarter longer. The expiry is moved only when less
-- than idle_s is left, so that most takes are one keyspace call (an EXPIRE on every take cost
-- as much as the write itself).
local function bucket_take(key, cur, cap, rate, now_us, ex)
  local tk = string.format('%.17g', cur - 1)
  local ts = string.format('%d', now_us)
  local idle_s = 86400
  if rate > 0 then idle_s = math.ceil(cap / rate) + 1 end
  local sec = math.floor(now_us / 1000000)
  if ex - sec < idle_s then
    ex = sec + idle_s + math.ceil(idle_s / 4)
    redis.call('HSET', key, 'tk', tk, 'ts', ts, 'ex', ex)
    redis.call('EXPIREAT', key, ex)
  else
    redis.call('HSET', key, 'tk', tk, 'ts', ts)
  end
  return tk, ts
end
