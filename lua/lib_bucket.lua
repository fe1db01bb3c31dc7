-- lib_bucket.lua: the token-bucket math of admit.lua and gates.lua, and its undo (refund.lua,
-- ungates.lua). Not a script of its own:
-- tools/embed.py puts this text in place of a `-- @include lib_bucket.lua` line of a script.
--
-- A bucket is a hash {tk = tokens, ts = last update in microseconds, ex = the key's expiry in unix
-- seconds}; a key never seen is a full bucket.

-- The bucket at `key` at now_us: {key, cap, rate, cur = min(cap, tk + elapsed * rate), tk and ts
-- as stored ('' when absent, for refund.lua to put back), ex (0 when absent)}.
local function bucket_read(key, cap, rate, now_us)
  local b = redis.call('HMGET', key, 'tk', 'ts', 'ex')
  local tk, ts = tonumber(b[1]), tonumber(b[2])
  local cur = cap
  if tk and ts then
    local elapsed = (now_us - ts) / 1e6
    if elapsed < 0 then elapsed = 0 end
    cur = math.min(cap, tk + elapsed * rate)
  end
  return {key = key, cap = cap, rate = rate, cur = cur, tk = b[1] or '', ts = b[2] or '',
          ex = tonumber(b[3]) or 0}
end

-- Milliseconds until a bucket at level `cur` holds `cost` tokens (1 for a request gate, the
-- token estimate for a token-rate gate); a day when it never refills.
local function bucket_wait_ms(cur, rate, cost)
  if rate > 0 then return math.ceil((cost - cur) / rate * 1000) end
  return 86400000
end

-- Notes a gate that would refuse, keeping the one with the longest wait, apart for enforced gates
-- (r[1] gate, r[2] ms: the request is refused) and shadow ones (r[3], r[4]: it is admitted all
-- the same and the answer names the gate). r starts as {'', 0, '', 0}.
local function refusal_note(r, gate, ms, shadow)
  local i = shadow and 3 or 1
  if r[i] == '' or ms > r[i + 1] then r[i], r[i + 1] = gate, ms end
end

-- "<sec><usec, 6 digits>": Redis TIME as microseconds, in text without a number conversion.
local function bucket_now_text(t)
  return t[1] .. string.sub('00000' .. t[2], -6)
end

-- Takes `cost` tokens from bucket b (from bucket_read) at second `sec`, stamping it ts (from
-- bucket_now_text); returns tk as stored (a string: Lua numbers would be truncated to integers
-- on the way out of a script). A negative cost gives tokens back (a settle below the estimate),
-- up to the capacity; a cost above the level takes the bucket below zero (a settle or a stream
-- charge above the estimate: the tokens were used, so the next requests wait for them). An idle
-- bucket goes away: the key lives at least until the bucket would be full again (idle_s, from
-- below zero too) and at most a quarter longer. The expiry is moved only when less than idle_s
-- is left, so that most takes are one keyspace call (an EXPIRE on every take cost as much as the
-- write itself).
local function bucket_take(b, sec, ts, cost)
  local tk = string.format('%.17g', math.min(b.cap, b.cur - cost))
  local idle_s = 86400
  if b.rate > 0 then idle_s = math.ceil((b.cap - math.min(0, b.cur - cost)) / b.rate) + 1 end
  if b.ex - sec < idle_s then
    local ex = sec + idle_s + math.ceil(idle_s / 4)
    redis.call('HSET', b.key, 'tk', tk, 'ts', ts, 'ex', ex)
    redis.call('EXPIREAT', b.key, ex)
  else
    redis.call('HSET', b.key, 'tk', tk, 'ts', ts)
  end
  return tk
end

-- Corrects the bucket at key by delta tokens (settle or a stream charge: actual - taken so far;
-- negative gives back up to the capacity, positive may go below zero) and returns tk as stored;
-- delta 0 writes nothing and returns the level.
local function bucket_correct(key, cap, rate, now_us, sec, ts, delta)
  local b = bucket_read(key, cap, rate, now_us)
  if delta == 0 then return string.format('%.17g', b.cur) end
  return bucket_take(b, sec, ts, delta)
end

-- Admits bucket b (from bucket_read, with its cost): takes its cost (bucket_take), or, for a
-- shadow bucket that holds less (the request is admitted all the same: the gate only reports),
-- takes nothing, as an enforcing refusal takes nothing. Returns tk after the decision and the
-- undo's snapshot entry "<old tk> <old ts>" (" " when the key did not exist), or "-" when nothing
-- was taken (no undo then).
local function bucket_admit(b, sec, ts)
  if b.cur < b.cost then return string.format('%.17g', b.cur), '-' end
  return bucket_take(b, sec, ts, b.cost), b.tk .. ' ' .. b.ts
end

-- Gives back the `cost` tokens one take took from the bucket at key k: byte for byte (tk and ts
-- as they were, or the key deleted when it did not exist) when nobody touched the bucket since
-- the take stored new_tk/new_ts; otherwise tk + cost, capped at cap, which is the level the
-- bucket would have had without the take (refill is computed from ts when read). old_tk is ''
-- when the key did not exist; new_ts is '' without a snapshot (the take's reply was lost). A key
-- that is gone expired because the bucket was full again: nothing to give back (returns 0, else
-- 1).
local function bucket_untake(k, cap, cost, old_tk, old_ts, new_tk, new_ts)
  local b = redis.call('HMGET', k, 'tk', 'ts')
  if new_ts ~= '' and b[1] == new_tk and b[2] == new_ts then
    if old_tk == '' then
      redis.call('DEL', k)
    else
      redis.call('HSET', k, 'tk', old_tk, 'ts', old_ts)
    end
  elseif b[1] then
    redis.call('HSET', k, 'tk', string.format('%.17g', math.min(cap, tonumber(b[1]) + cost)))
  else
    return 0
  end
  return 1
end
