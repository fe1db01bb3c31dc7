-- lib_bucket.lua: the token-bucket math of admit.lua and gates.lua, and its undo (refund.lua,
-- ungates.lua). Not a script of its own:
-- tools/embed.py puts this text in place of a `-- @include lib_bucket.lua` line of a script.
--
-- A bucket is a hash {tk = tokens, ts = last update in microseconds, ex = the key's expiry in unix
-- seconds}; a key never seen is a full bucket (without warm-up, below).
--
-- Warm-up (a gate's warmup_s, W > 0): a key never seen is a cold bucket instead, holding a third
-- of its capacity C, and its hash gets one more field, c = its creation time (microseconds, as
-- ts). At age a (now - c) up to W its capacity is C/3 + (2C/3)·a/W and its refill rate R/3 +
-- (2R/3)·a/W, from W on C and R, so a cold start (first use, an idle key expired, Redis lost it)
-- does not let a full burst through at once. The refill between ts and now is the integral of
-- that rate, exact: what a bucket gains does not depend on how often it is read. A hash without
-- c is warm (a bucket of a gate without warm-up, or made before the gate had one), so such
-- buckets are read and written exactly as without warm-up; a gate whose warm-up is removed
-- reads a bucket with c as warm too. reconcile.lua passes W = 0: it does not ramp.

-- The bucket at `key` at now_us, for a gate of warm-up w seconds (0: none) and a take of `cost`
-- (nil where the caller takes nothing fixed), as an array: by position, not by field name, since
-- ten named fields cost about 3,900 instructions to make, the same ten in the array part about
-- 1,700, each read cheaper as well (admit_lua_cost.sh, one bucket: 162.5k → 159.8k per call):
--   b[1] key, b[2] cap, b[3] rate, b[4] cost,
--   b[5] cur = the level now, min(the capacity now, tk + refill since ts),
--   b[6] lim = the capacity now (cap unless warming),
--   b[7] tk, b[8] ts as stored ('' when absent, for refund.lua to put back),
--   b[9] ex (0 when absent), b[10] w,
-- and for a warming bucket b[11] age = now - c (s), b[12] up = tk + refill (the level before
-- the capacity caps it, which the wait is computed from), b[13] c (its creation time as
-- stored; '' for a new one, which bucket_take stamps) and b[14] ramp = what its refill gains
-- from now to the end of the ramp (bucket_wait_ms); nil for any other bucket. The table is made
-- once, by a constructor with all its values, which sizes it for them. c is read only with
-- warm-up: a field asked for is a search of the hash's listpack even when absent.
local function bucket_read(key, cap, rate, w, now_us, cost)
  local b
  if w > 0 then
    b = redis.call('HMGET', key, 'tk', 'ts', 'ex', 'c')
  else
    b = redis.call('HMGET', key, 'tk', 'ts', 'ex')
  end
  -- `s + 0`, not tonumber(s), which parses a string twice (Lua 5.1); fields absent are false.
  local tk, ts = b[1] and b[1] + 0, b[2] and b[2] + 0
  local ex = b[3] and b[3] + 0 or 0
  if w > 0 and (not (tk and ts) or b[4]) then
    -- Tokens the bucket gains from age a0 to age a1 (seconds, 0 <= a0 <= a1): the integral of
    -- R/3 + (2R/3)·a/W up to W, of R after. Defined here, not at the top level, where it would be
    -- a closure made on every call of the script, warm-up or not.
    local function ramp_gain(a0, a1)
      local gain = 0
      if a0 < w then
        local x1 = math.min(a1, w)
        gain = (x1 - a0) * (rate / 3 + rate * (x1 + a0) / (3 * w))
      end
      if a1 > w then gain = gain + (a1 - math.max(a0, w)) * rate end
      return gain
    end
    local cur, lim, age, up, c
    if not (tk and ts) then
      cur, lim, age, up, c = cap / 3, cap / 3, 0, cap / 3, ''
    else
      local c0 = b[4] + 0
      local a1 = math.max(0, (now_us - c0) / 1e6)
      local a0 = math.min(a1, math.max(0, (ts - c0) / 1e6))
      age, c = a1, b[4]
      up = tk + ramp_gain(a0, a1)
      -- The capacity at age a1.
      lim = a1 >= w and cap or cap / 3 + 2 * cap / 3 * a1 / w
      cur = math.min(lim, up)
    end
    return {key, cap, rate, cost, cur, lim, b[1] or '', b[2] or '', ex, w, age, up, c,
            ramp_gain(age, w)}
  end
  -- min(cap, tk + refill) as math.min makes it (the second only when below the first), without
  -- the call to a library function, about 200 instructions each (admit_lua_cost.sh); so are the
  -- minimums of bucket_take.
  local cur = cap
  if tk and ts then
    local elapsed = (now_us - ts) / 1e6
    if elapsed < 0 then elapsed = 0 end
    local up = tk + elapsed * rate
    if up < cur then cur = up end
  end
  return {key, cap, rate, cost, cur, cap, b[1] or '', b[2] or '', ex, w}
end

-- Milliseconds until bucket b (from bucket_read) holds `cost` tokens (1 for a request gate, the
-- token estimate for a token-rate gate); a day when it never refills. A warming bucket holds
-- cost once both its capacity and its uncapped level have reached it: the capacity linearly, the
-- level by the integral of the ramp (a quadratic in the wait up to W, linear after). A cost above
-- the full capacity waits for the level alone, as without warm-up.
local function bucket_wait_ms(b, cost)
  local rate = b[3]
  if rate <= 0 then return 86400000 end
  local a = b[11]  -- age: a warming bucket
  if not a then return math.ceil((cost - b[5]) / rate * 1000) end
  local w, cap = b[10], b[2]
  local t_cap = 0
  local want = math.min(cost, cap)
  if want > b[6] then t_cap = w * (want - cap / 3) / (2 * cap / 3) - a end
  local need, t_fill = cost - b[12], 0
  if need > 0 then
    local ramp = b[14]
    if need <= ramp then
      -- rate(a)·t + (R/(3W))·t² = need, in the form that does not cancel.
      local lin, quad = rate / 3 + 2 * rate * a / (3 * w), rate / (3 * w)
      t_fill = 2 * need / (lin + math.sqrt(lin * lin + 4 * quad * need))
    else
      t_fill = math.max(0, w - a) + (need - ramp) / rate
    end
  end
  return math.ceil(math.max(t_cap, t_fill) * 1000)
end

-- Notes a gate that would refuse, keeping the one with the longest wait, apart for enforced gates
-- (r[1] gate, r[2] ms: the request is refused) and shadow ones (r[3], r[4]: it is admitted all
-- the same and the answer names the gate; '' and 0 where none), and returns r. r is nil until
-- the first such gate, which makes it: most calls pass every gate, and each table a call makes
-- costs Redis about a thousand instructions (admit_lua_cost.sh).
local function refusal_note(r, gate, ms, shadow)
  r = r or {'', 0, '', 0}
  local i = shadow and 3 or 1
  if r[i] == '' or ms > r[i + 1] then r[i], r[i + 1] = gate, ms end
  return r
end

-- A level as stored and returned: the text string.format('%.17g') gives, which reads back as the
-- same number. A whole level (most are: costs and refills per microsecond are whole numbers in
-- the common plans) is written with '%d', the same text without the floating-point formatter,
-- which cost a tenth of an admission; 0 keeps '%.17g' for its sign (-0).
local function bucket_level_text(x)
  if x % 1 == 0 and x ~= 0 and x > -1e15 and x < 1e15 then return string.format('%d', x) end
  return string.format('%.17g', x)
end

-- "<sec><usec, 6 digits>": Redis TIME as microseconds, in text without a number conversion; the
-- microseconds are padded only when short (a tenth of the time), each string made costing Redis.
local function bucket_now_text(t)
  local us = t[2]
  if #us < 6 then us = string.sub('00000' .. us, -6) end
  return t[1] .. us
end

-- Takes `cost` tokens from bucket b (from bucket_read) at second `sec`, stamping it ts (from
-- bucket_now_text); returns tk as stored (a string: Lua numbers would be truncated to integers
-- on the way out of a script). A negative cost gives tokens back (a settle below the estimate),
-- up to the capacity; a cost above the level takes the bucket below zero (a settle or a stream
-- charge above the estimate: the tokens were used, so the next requests wait for them). A new
-- warming bucket is stamped c = ts. An idle bucket goes away: the key lives at least until the
-- bucket would be full again (idle_s, from below zero too, plus what is left of a warm-up: the
-- full rate and capacity are reached at W) and at most a quarter longer. The expiry is moved
-- only when less than idle_s is left, so that most takes are one keyspace call (an EXPIRE on
-- every take cost as much as the write itself).
local function bucket_take(b, sec, ts, cost)
  local key, cap, rate, cur, age, w = b[1], b[2], b[3], b[5], b[11], b[10]
  local left, tk, low = cur - cost, b[6], 0  -- tk = min(lim, left), low = min(0, left)
  if left < tk then tk = left end
  if left < low then low = left end
  tk = bucket_level_text(tk)
  local idle_s = 86400
  if rate > 0 then idle_s = math.ceil((cap - low) / rate) + 1 end
  if age and age < w then idle_s = idle_s + math.ceil(w - age) end
  if b[9] - sec < idle_s then  -- always for a new bucket (ex 0)
    local ex = sec + idle_s + math.ceil(idle_s / 4)
    if b[13] == '' then
      redis.call('HSET', key, 'tk', tk, 'ts', ts, 'ex', ex, 'c', ts)
    else
      redis.call('HSET', key, 'tk', tk, 'ts', ts, 'ex', ex)
    end
    redis.call('EXPIREAT', key, ex)
  else
    redis.call('HSET', key, 'tk', tk, 'ts', ts)
  end
  return tk
end

-- Corrects the bucket at key by delta tokens (settle or a stream charge: actual - taken so far;
-- negative gives back up to the capacity, positive may go below zero) and returns tk as stored;
-- delta 0 writes nothing and returns the level.
local function bucket_correct(key, cap, rate, w, now_us, sec, ts, delta)
  local b = bucket_read(key, cap, rate, w, now_us)
  if delta == 0 then return bucket_level_text(b[5]) end
  return bucket_take(b, sec, ts, delta)
end

-- Admits bucket b (from bucket_read, with its cost): takes its cost (bucket_take), or, for a
-- shadow bucket that holds less (the request is admitted all the same: the gate only reports),
-- takes nothing, as an enforcing refusal takes nothing. Returns tk after the decision and the
-- undo's snapshot entry "<old tk> <old ts>" (" " when the key did not exist), or "-" when nothing
-- was taken (no undo then). `refused`: the call is refused, and a refusal changes nothing, with
-- one exception, made here as for the shadow bucket: a new warming bucket that holds less than
-- its cost (cost > C/3) is created all the same (level C/3, c = now), or its ramp would never
-- start and such a cost never pass. One function for both, not two: each function a script
-- defines is a closure made on every call (about 500 instructions, admit_lua_cost.sh).
local function bucket_admit(b, sec, ts, refused)
  if refused or b[5] < b[4] then
    if b[13] == '' and b[5] < b[4] then bucket_take(b, sec, ts, 0) end
    return bucket_level_text(b[5]), '-'
  end
  return bucket_take(b, sec, ts, b[4]), b[7] .. ' ' .. b[8]
end

-- Gives back the `cost` tokens one take took from the bucket at key k: byte for byte (tk and ts
-- as they were, or the key deleted when it did not exist) when nobody touched the bucket since
-- the take stored new_tk/new_ts; otherwise tk + cost, capped at cap, which is the level the
-- bucket would have had without the take (refill is computed from ts when read, and a warming
-- bucket's read caps it at the ramp's capacity, so no warm-up is needed here). old_tk is ''
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
    redis.call('HSET', k, 'tk', bucket_level_text(math.min(cap, tonumber(b[1]) + cost)))
  else
    return 0
  end
  return 1
end
