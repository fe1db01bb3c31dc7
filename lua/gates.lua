-- gates.lua: a global gate (a model or tool token bucket or sliding window shared by every
-- tenant, or the total gate every admission of every tenant passes): a call carries one bucket
-- or one window (lib_window.lua), the other list empty.
--
-- Called for each global gate a request meets (a model or tool with a configured gate, the total
-- gate when configured), at the same time as admit.lua (the tenant-scoped part) and the
-- request's other global gates: each global bucket ("dg:{g:model:<name>}:tb",
-- "dg:{g:tool:<name>}:tb", "dg:{g:total}:tb") carries its own hash tag, so on a Redis Cluster it
-- has its own slot, and one call per slot keeps every script's keys in one slot. When any part
-- refuses, the engine undoes the parts that admitted (refund.lua, ungates.lua). All-or-nothing
-- across the buckets given (the engine gives one): a refusal writes nothing, but for admit.lua's
-- one exception (a new bucket with warm-up that holds less than its cost is created, so that
-- its ramp starts: lib_bucket.lua's bucket_admit). Same bucket math as admit.lua
-- (lib_bucket.lua).
--
-- An admission leaves a marker, "ran", that ungates.lua looks for: the reply may come after
-- the request was answered 503 or never (a lost connection), and only Redis can tell whether the
-- call ran. ungates.lua of a call that has not run writes "cancelled" there instead, so that
-- the call, should it still run (from a buffer of a stopped Redis), refuses.
--
-- Waiters on other workers and daemons come first (lib_waiters.lua): the bucket must hold this
-- call's cost beyond what the registered first waiters ahead of it need (a window: its limit less
-- their count, at least 1), or the call is refused with the wait for both.
--
-- A booked token: a call that may wait, that no registered waiter is ahead of, refused only
-- because its bucket's next token has not come yet (one bucket, no window), takes that token now
-- and is admitted with the time it exists (due_us), when the token comes within the request's own
-- wait (book_ms) and the bucket is not promised beyond one token per registered worker besides
-- the caller (its level, after earlier bookings, at least -(others) x cost). The bucket goes
-- below zero by the cost: every later call sees the token gone, so the booking cannot be lost to
-- another worker or daemon, and the caller, which would have been refused and called again at
-- that time (often to be refused again, a later booking or a higher band having come first),
-- makes no second call: the engine sends its tenant's part at the token's time and answers then.
-- Only a worker's first waiter, or a newcomer while other workers wait: a newcomer alone on the
-- gate queues as before (nobody contends for the token it would book). A higher band that comes
-- later waits at most the tokens booked before it, one per worker that waits.
--
-- @keys attempt taken waiters bucket...
-- @argv attempt_ttl taken_ttl deadline holder turn band left_ms next_band next_tenants book_ms
-- @argv bucket_count
-- @argv bucket...(gate capacity refill cost shadow warmup_s)
--
-- @argv windows...(count member) window...(gate limit window_ms shadow)
-- KEYS: attempt    "dg:{g:<kind>:<name>}:a:<attempt>" or "dg:{g:total}:a:<attempt>" (the first
--                  bucket's hash tag): the marker
--       taken      a model_tokens gate: "dg:{g:model_tokens:<name>}:s:<request_id>", the tokens
--                  the request has taken from the bucket so far (its estimate, then its stream
--                  charges), for settle_gates.lua to correct to the tokens used; other gates
--                  pass the attempt key again (taken_ttl 0: not written)
--       waiters    "dg:{g:<kind>:<name>}:wq" or "dg:{g:total}:wq": the gate's first waiter of
--                  each worker (lib_waiters.lua)
--       bucket...  the bucket hashes (lib_bucket.lua)
--       then, after the bucket keys, the sliding windows' sorted sets (lib_window.lua)
-- ARGV: attempt_ttl   seconds the marker is kept: how long an undo can still find it
--       taken_ttl     seconds the taken record is kept (the plan's reservation_ttl_s: a settle
--                     after it corrects nothing, like a settle of an expired reservation); 0: none
--       deadline      unix ms on Redis's clock past which the gateway has answered the call
--                     failed, as admit.lua's: later, code 4 and nothing written
--       holder        the calling worker's id (the field of its entry in waiters)
--       turn          'h': the first of the worker's waiters on this gate; 'n': a request that
--                     may wait, a newcomer (refused, it becomes the worker's entry unless the
--                     worker has one of its band or a higher one); '-': one that does not wait
--                     (band 8, writes nothing)
--       band          the request's band (0 first)
--       left_ms       how long the request, or the worker's last waiter behind it on this
--                     gate, may still wait: its entry never outlives that
--       next_band     'h' only: the band of the worker's next waiter on this gate, -1 for none;
--                     admitted, the worker's entry becomes that waiter's, its turn beginning now
--       next_tenants  'h' only: the worker's tenants with waiters in next_band, k: when that band
--                     is this one's, the worker's next turn begins 1/k of the way from its last
--                     turn's beginning to now, not now, so that it takes k turns in the time a
--                     worker with one tenant takes one: a tenant's share does not depend on how
--                     many tenants its worker has
--       book_ms       how long the request itself may still wait (its own deadline, not its
--                     worker's last waiter's): a token booked for it comes within that; 0: it
--                     books none
--       bucket_count  n; bucket...  per bucket: gate name, capacity, refill per second, cost
--                     (1; a model_tokens gate: the request's token estimate), shadow ("1": the
--                     gate only reports: one that holds less than its cost does not refuse, see
--                     below), warmup_s (the ramp of a new bucket, lib_bucket.lua; "0": none)
--       windows       after the buckets: count m, the number of sliding windows, and member
--                     "<request_id>:<attempt>", what an admission adds to each window
--       window...     per window: gate name, limit, window_ms, shadow (as admit.lua's)
--
-- Returns {code, gate, retry_after_ms, tokens_1 .. tokens_n, count_1 .. count_m [, snapshot]
-- [, next_ms]}:
-- count_j the admissions in window j before the decision (as admit.lua's); code 1 admitted, 0
-- refused by gate (the one with the longest wait), 3 cancelled (nothing evaluated), 4 past its
-- deadline (nothing evaluated: a failure, not a refusal); tokens_i as
-- strings, after the decision. Admitted, gate and retry_after_ms name the shadow gate that
-- would have refused (the longest wait; "" and 0: none). snapshot (admitted): per bucket "<old
-- tk> <old ts>" (" " when the key did not exist; "-" for an empty shadow bucket, which gave
-- nothing), then the new ts of every bucket, for ungates.lua to restore them byte for byte when
-- another part of the admission refuses. next_ms (turn 'h', admitted; the last element): when
-- the bucket holds the next waiter's cost beyond what the entries ahead of it need, -1 for none or
-- a window. due_us (turn 'h' or 'n', admitted; the last element, after next_ms): how long after
-- Redis's decision the token booked for the call exists, 0 when it did already.

if redis.call('EXISTS', KEYS[K_ATTEMPT]) == 1 then return {3} end

local t = redis.call('TIME')
local sec = tonumber(t[1])
local now_us = sec * 1000000 + tonumber(t[2])
if math.floor(now_us / 1000) > tonumber(ARGV[A_DEADLINE]) then return {4} end
local n = tonumber(ARGV[A_BUCKET_COUNT])

-- @include lib_waiters.lua
local turn, band, holder = ARGV[A_TURN], tonumber(ARGV[A_BAND]), ARGV[A_HOLDER]
local others, mine, kept = waiters_read(KEYS[K_WAITERS], holder, turn == 'h', now_us)
-- A first waiter keeps the turn its entry began; anyone else's begins now, after the others'.
local since = now_us
if turn == 'h' and mine and mine[1] == band then
  since = mine[2]
elseif turn == 'h' and kept[band] then  -- back to a band whose turn it kept
  since = kept[band]
end
local ahead = waiters_ahead(others, band, since)

-- @include lib_bucket.lua
local r  -- the gates that would refuse (refusal_note)
local buckets = {}
for i = 1, n do
  local a = A_BUCKET + (i - 1) * A_BUCKET_STRIDE
  local cap = tonumber(ARGV[a + A_BUCKET_CAPACITY])
  local rate = tonumber(ARGV[a + A_BUCKET_REFILL])
  local cost = tonumber(ARGV[a + A_BUCKET_COST])
  local b = bucket_read(KEYS[K_BUCKET + i - 1], cap, rate, tonumber(ARGV[a + A_BUCKET_WARMUP_S]),
                        now_us, cost)
  buckets[i] = b
  if b[5] < cost + ahead then  -- the level now (lib_bucket.lua's bucket_read)
    r = refusal_note(r, ARGV[a + A_BUCKET_GATE], bucket_wait_ms(b, cost + ahead),
                     ARGV[a + A_BUCKET_SHADOW] == '1')
  end
end

-- Sliding windows: their keys follow the bucket keys, their ARGV the bucket groups.
-- @include lib_window.lua
local ws = A_BUCKET + n * A_BUCKET_STRIDE
local m = tonumber(ARGV[ws + A_WINDOWS_COUNT])
local windows = {}
for j = 1, m do
  local a = ws + A_WINDOWS_STRIDE + (j - 1) * A_WINDOW_STRIDE
  local sw = window_read(KEYS[K_BUCKET + n + j - 1],
                        math.max(1, tonumber(ARGV[a + A_WINDOW_LIMIT]) - ahead),
                        tonumber(ARGV[a + A_WINDOW_WINDOW_MS]) * 1000, now_us)
  windows[j] = sw
  if sw.wait_ms > 0 then
    r = refusal_note(r, ARGV[a + A_WINDOW_GATE], sw.wait_ms, ARGV[a + A_WINDOW_SHADOW] == '1')
  end
end

local out = {0, r and r[1] or '', r and r[2] or 0}
-- A booked token (the header): the wait the refusal would have named, in µs.
local due_us = 0
if out[2] ~= '' and (turn == 'h' or (turn == 'n' and #others > 0)) and ahead == 0 and n == 1 and
    m == 0 then
  local b = buckets[1]
  if b[5] >= -#others * b[4] and b[4] <= b[2] and out[3] <= tonumber(ARGV[A_BOOK_MS]) then
    due_us = b[11] and out[3] * 1000 or math.ceil((b[4] - b[5]) / b[3] * 1000000)
    out[2], out[3] = '', 0
  end
end
for j = 1, m do out[3 + n + j] = windows[j].count end
local ts = bucket_now_text(t)
local now_ms = math.floor(now_us / 1000)
local my_cost = n == 1 and tonumber(ARGV[A_BUCKET + A_BUCKET_COST]) or 1
if out[2] ~= '' then
  for i = 1, n do out[3 + i] = bucket_admit(buckets[i], sec, ts, true) end
  -- A request that may wait takes its worker's place among the waiters, unless the worker has
  -- one of its band or a higher one (its first waiter's, which this newcomer comes after).
  if turn == 'h' or (turn == 'n' and not (mine and mine[1] <= band)) then
    local until_ms = now_ms + math.min(tonumber(ARGV[A_LEFT_MS]), 2 * out[3] + 250)
    if mine and mine[1] > band then  -- its lower band's turn, kept for later
      waiters_keep(KEYS[K_WAITERS], holder .. ':' .. mine[1], mine[1], mine[2], 0, mine[3], now_ms)
    end
    waiters_keep(KEYS[K_WAITERS], holder, band, since, my_cost, until_ms, now_ms)
  end
  return out
end

out[1] = 1
if r then out[2], out[3] = r[3], r[4] end
local taken = 0
for i = 1, n do
  local b = buckets[i]
  if due_us > 0 then  -- the booked token, taken below zero
    out[3 + i], out[3 + n + m + i] = bucket_take(b, sec, ts, b[4]), b[7] .. ' ' .. b[8]
  else
    out[3 + i], out[3 + n + m + i] = bucket_admit(b, sec, ts)
  end
  if out[3 + n + m + i] ~= '-' then taken = taken + b[4] end  -- its cost
end
for j = 1, m do window_admit(windows[j], now_us, ts, ARGV[ws + A_WINDOWS_MEMBER]) end
out[4 + 2 * n + m] = ts
redis.call('SET', KEYS[K_ATTEMPT], 'ran', 'EX', ARGV[A_ATTEMPT_TTL])
if turn == 'h' then
  -- The worker's turn passes on: its next waiter's begins now, after every entry of its band (or,
  -- with k tenants in that band, 1/k of the way from its last turn's beginning to now).
  local next_band, next_ms = tonumber(ARGV[A_NEXT_BAND]), -1
  if next_band < 0 then
    redis.call('HDEL', KEYS[K_WAITERS], holder)
  else
    local k, next_since = tonumber(ARGV[A_NEXT_TENANTS]), now_us
    if mine and mine[1] == next_band then
      if k > 1 then next_since = math.floor(mine[2] + (now_us - mine[2]) / k) end
    elseif kept[next_band] then  -- back to a band whose turn it kept
      next_since = kept[next_band]
      redis.call('HDEL', KEYS[K_WAITERS], holder .. ':' .. next_band)
    end
    -- A window: until its oldest admission could have left it.
    local until_ms = now_ms + (m > 0 and math.ceil(windows[1].w_us / 1000) or 0)
    if n == 1 then
      -- The level after this take reaches its cost plus the need ahead of it when the level
      -- before it reaches that plus this call's cost.
      next_ms = math.max(0, bucket_wait_ms(buckets[1],
                                           2 * my_cost + waiters_ahead(others, next_band, next_since)))
      until_ms = now_ms + 2 * next_ms + 250
    end
    waiters_keep(KEYS[K_WAITERS], holder, next_band, next_since, my_cost, until_ms, now_ms)
  end
  out[#out + 1] = next_ms
end
if turn ~= '-' then out[#out + 1] = due_us end
if ARGV[A_TAKEN_TTL] ~= '0' then
  redis.call('SET', KEYS[K_TAKEN], taken, 'EX', ARGV[A_TAKEN_TTL])
end
return out
