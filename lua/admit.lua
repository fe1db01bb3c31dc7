-- admit.lua: one admission for one tenant, atomically, in the tenant's hash slot.
--
-- Evaluates every tenant-scoped gate (token buckets or sliding windows tenant/user/api_key/ip,
-- the token-rate buckets, the LLM-token quotas of each period, the concurrency leases) and consumes from all of them only when all pass: a refusal
-- leaves every key as it was (not even a refreshed bucket timestamp, so later refill math and a
-- byte-level dump of the keys are unchanged; the quota charge, made first to spare a read, is
-- taken back before the script ends). One exception: a bucket with warm-up that does not exist
-- yet and holds less than its cost at C/3 is created by the refusal (lib_bucket.lua's
-- bucket_admit), so that its ramp starts; nothing else is written. redis.call('TIME') is the only clock. A gate in shadow mode
-- (a bucket's shadow flag, quota_shadow, streams_shadow) is evaluated and consumed the same way
-- but does not refuse: the request is admitted and the reply names it.
--
-- @keys res_m2 res_m1 res_0 res_p1 res_p2 leases quota...(prev cur next) bucket...
-- @argv request_id flags tokens reservation_ttl max_open max_streams lease_s res_base deadline
-- @argv quota_count bucket_count
-- @argv quota...(gate budget prev_start start end next_end)
-- @argv bucket...(gate capacity refill cost shadow warmup_s)
--
-- @argv windows...(count member) window...(gate limit window_ms shadow)
-- KEYS (named by the @keys line: K_<NAME>, whose number tools/embed.py puts in its place,
-- checking every use):
--   res_m2 .. res_p2  the reservation windows res_base - 2 .. res_base + 2 (lib_reservation.lua)
--   leases        zset "dg:{t:<tenant>}:leases" (member request_id, score deadline in ms)
--   quota...      per quota, "dg:{t:<tenant>}:q:<period>": the counters of the previous,
--                 current and next period of the gateway's clock; the script uses the one of
--                 Redis TIME (lib_quota.lua)
--   bucket...     the bucket hashes (fields tk = tokens, ts = last update in microseconds)
--   then, after the bucket keys, the sliding windows' sorted sets (lib_window.lua), as many as
--   windows.count says
-- ARGV (A_<NAME>):
--   request_id
--   flags         four characters, "1" or "0" each, then the attempt (one argument, not five:
--                 each argument costs Redis a string and a table slot on every call), in this
--                 order:
--     fresh       "1": request_id was generated for this call (random, so it cannot be in use
--                 yet): the previous reservation window is not looked up unless max_open needs
--                 its count, and the reservation stores "-" for the attempt (the id names the
--                 call). "0": the client's own request_id.
--     snapshot    "1": return what refund.lua needs to undo this admission exactly (prior
--                 bucket states, pruned leases): the engine asks for it on every call, since a
--                 global gate may refuse, or the reply may come after the request was answered
--                 503. "0": no undo possible (replays, benchmarks).
--     quota_shadow "1": the quota and reservations gates only report (shadow mode: a request
--                 they would refuse is admitted, reserved and counted like any other)
--     streams_shadow "1": the same for the concurrency gate (the lease is taken)
--     attempt     16 hex digits, new for every call: names this call apart from another one
--                 with the same request_id (a client's retry), for refund.lua, which may have
--                 cancelled it before it ran (its reply was lost), so it must not run now; read
--                 only for a client's id (an engine-generated id names its call)
--   tokens        to reserve (integer >= 0), against every quota
--   reservation_ttl (s)
--   max_open      open reservations the tenant may have; -1: no cap
--   max_streams   -1: no concurrency gate (no lease taken)
--   lease_s       lease length (s)
--   res_base      the gateway's reservation window, floor(now / reservation_ttl)
--   deadline      unix ms on Redis's clock (the gateway's plus the offset it measured, plus a
--                 skew allowance: RedisClient::script_deadline_ms): past it the gateway has
--                 answered this call failed, so a call Redis runs later (from a stopped
--                 Redis's buffer) must take nothing: answered code 4, nothing read or written
--   quota_count   q, the number of quotas (at least 1: a plan without one counts its tokens
--                 in a month counter of budget -1)
--   bucket_count  n, the number of buckets
--   quota...      per quota: gate (its name when it refuses: "quota" for the month,
--                 "quota_<period>" otherwise), budget (tokens per period; -1: no quota gate,
--                 usage is still counted), prev_start, start, end, next_end (the first seconds of
--                 the periods of its prev, cur and next keys and of the period after those, unix
--                 s in the plan's quota_timezone: lib_quota.lua)
--   bucket...     per bucket: gate name, capacity, refill per second, cost (1 for a request
--                 gate, the token estimate for a token-rate gate: tenant_tokens, user_tokens,
--                 api_key_tokens), shadow ("1": a bucket holding less than its cost does not
--                 refuse; it gives nothing, as an enforcing refusal takes nothing), warmup_s
--                 (the ramp from a third of the capacity and refill to all of them of a new
--                 bucket, lib_bucket.lua; "0": none)
--   windows       after the buckets: count m, the number of sliding windows, and member
--                 "<request_id>:<attempt>", what an admission adds to each window; both left
--                 out when there are none (m = 0), the most common call
--   window...     per window (lib_window.lua): gate name, limit (admissions in a window),
--                 window_ms, shadow ("1": a full window does not refuse; it takes nothing)
--
-- Fails with an error reply "ERR clock: ..." (nothing written) when Redis TIME lies outside the
-- declared periods or windows. Returns {4} (nothing written) when Redis TIME is past deadline.
-- Returns {code, quota_existed, used_1, left_s_1, len_s_1 .. used_q, left_s_q, len_s_q,
-- tokens_1 .. tokens_n, count_1 .. count_m [, snapshot] [, gate, retry_after_ms
-- [, live_leases, first_lease_ms [, pruned]]]}: what is usually the same ends the reply and is
-- left out there, since each element costs Redis a conversion and the daemon a parse (a
-- missing gate is "", a missing retry_after_ms 0); the caller knows which parts to expect.
--   code 1 admitted, 0 refused (gate = the refusing gate with the longest wait), 2 the
--   request_id has a live reservation, 3 this attempt was cancelled (nothing written), 4 past
--   its deadline (nothing read or written: a failure for the caller, not a refusal); gate
--   "reservations" refuses when max_open reservations are open. Admitted (code 1), gate and
--   retry_after_ms name the shadow gate that would have refused (longest wait; "" and 0: none),
--   shadow refusals are not reported beside a real one. gate and retry_after_ms are left out
--   when gate is "" and no concurrency gate follows. quota_existed: a character per quota, "1"
--   when its counter existed before the call; used_k (quota k's counter), left_s_k and len_s_k
--   (the seconds left of its period and the period's length); used_k and live_leases are after the
--   decision; live_leases and first_lease_ms (ms until the earliest live lease ends, 0: none)
--   are there only with a concurrency gate (max_streams >= 0). tokens_i are strings: Lua
--   numbers would be truncated to integers on the way out. count_j: the admissions in window j
--   before the decision (an admission adds one unless the window is full, which only a shadow
--   window admits; an undo removes it). snapshot (admitted with snapshot = "1"): per bucket
--   "<old tk> <old ts>" (" " when the key did not exist; "-" for an empty shadow bucket: nothing
--   taken), then the new ts of every bucket (their new tk are tokens_i), exactly as stored.
--   pruned (admitted with snapshot = "1" and a concurrency gate): the number k of expired
--   leases pruned and k pairs member, score.

-- The routines first: they index the globals KEYS and ARGV and call redis.call and the string
-- library. The body then reads the four as locals (a register instead of a lookup in the
-- globals table, about 130 instructions each use, some thirty uses per call); a function
-- defined after them would hold them as upvalues (lib_window.lua's, only with windows).
-- @include lib_reservation.lua
-- @include lib_quota.lua
-- @include lib_bucket.lua
local ARGV, KEYS, redis, string = ARGV, KEYS, redis, string

-- Numbers arrive as strings (ARGV, TIME, replies) and are converted with `s + 0`, not
-- tonumber(s): Lua 5.1's tonumber parses a string twice (lua_isnumber, then lua_tonumber, each a
-- strtod), and conversions were a tenth of this script's instructions
-- (tools/bench/admit_lua_cost.sh).
local t = redis.call('TIME')
-- TIME as stored text, "<sec><usec, 6 digits>" (lib_bucket.lua's bucket_now_text, in place: that
-- function would be a closure made on every call), read as a number once: one parse instead of
-- one for each part.
local ts = t[2]
if #ts < 6 then ts = string.sub('00000' .. ts, -6) end
ts = t[1] .. ts
local now_us = ts + 0
local sec = (now_us - now_us % 1000000) / 1000000
-- floor(now_us / 1000) in exact integer arithmetic, without a call to math.floor.
local now_ms = (now_us - now_us % 1000) / 1000
-- The gateway gave up on this call: whatever it would take would go to no one.
if now_ms > ARGV[A_DEADLINE] + 0 then return {4} end

local rid = ARGV[A_REQUEST_ID]
-- The flags' characters; 49 is "1".
local flags = ARGV[A_FLAGS]
local fresh, snapshot, quota_shadow, streams_shadow = string.byte(flags, 1, 4)
fresh, snapshot, quota_shadow, streams_shadow =
    fresh == 49, snapshot == 49, quota_shadow == 49, streams_shadow == 49
local res_ttl = (ARGV[A_RESERVATION_TTL] + 0)

-- The current window: a live reservation of request_id, the open count, a cancellation (looked
-- up here only: refund.lua writes it into the window of its own time and the next one, and this
-- call runs after it). The previous window: request_id and the open count, when they matter.
local cur_key, prev_key, _, cur_expire, w = res_windows(res_ttl, sec)
-- Each quota's period of Redis TIME among the declared ones: per quota k, at 4k-3 .. 4k of one
-- table (each table a call makes costs Redis about a thousand instructions) its counter key,
-- the period's bounds, and later its count before this call.
local nq = ARGV[A_QUOTA_COUNT]
nq = nq == '1' and 1 or nq + 0
local quotas = {}
for k = 1, nq do
  local qkey, from, to = quota_period(k, sec)
  if not qkey then return redis.error_reply(string.format(clock_error, sec)) end
  quotas[4 * k - 3], quotas[4 * k - 2], quotas[4 * k - 1] = qkey, from, to
end
if not (cur_key and prev_key) then
  return redis.error_reply(string.format(clock_error, sec))
end
-- Integer arguments: their most common values (-1: no gate; 0, 1) are compared as text, without
-- a parse; in place, since a function for it would be a closure made on every call.
local max_open = ARGV[A_MAX_OPEN]
max_open = max_open == '-1' and -1 or max_open + 0
-- A call of an engine-generated id (fresh) is cancelled by the field request_id itself, "x" (the
-- id names the call): one field fewer to look up (in a listpack window a scan that finds
-- nothing), one reply element and one string fewer. A client's id may be retried by another attempt, which a
-- cancellation must not refuse: "x:<attempt>", and an "x" under its id is no reservation.
-- Without max_open, such a call (late) reads nothing of the window before its decision: it
-- writes its reservation with HSETNX, which finds the field taken when the call was cancelled or
-- already ran (the same call delivered twice), and counts it open with HINCRBY, which answers
-- the count; a refusal reads the field. Two keyspace calls with scalar replies instead of an
-- HMGET (a reply table) and an HSET, and the count is neither parsed nor formatted.
local late = fresh and max_open < 0
local c, cur_rid, cur_open, attempt
if late then
  cur_open = false
elseif fresh then
  c = redis.call('HMGET', cur_key, rid, '#')
  cur_rid, cur_open = c[1], c[2]
  if cur_rid == 'x' then return {3} end
else
  attempt = string.sub(flags, 5)
  c = redis.call('HMGET', cur_key, rid, '#', 'x:' .. attempt)
  cur_rid, cur_open = c[1] ~= 'x' and c[1], c[2]
  if c[3] then return {3} end
end
local prev_rid, prev_open = false, false
if not fresh or max_open >= 0 then
  local p = redis.call('HMGET', prev_key, rid, '#')
  prev_rid, prev_open = not fresh and p[1] ~= 'x' and p[1], p[2]
end
-- request_id's reservation in the current window is live: created in the window, it lives
-- reservation_ttl, the window's length. One in the previous window lives until its creation
-- time (relative to that window, or a unix time when above the window's length: an older
-- value) + reservation_ttl. Read here, not by lib_reservation.lua's res_parse, which this script
-- would define as a closure on every call (about 500 instructions) for a rare lookup.
if cur_rid then return {2} end
if prev_rid then
  local created = string.match(prev_rid, '^%S+ %S+ (%S+)') + 0
  if created < res_ttl * 1000 then created = created + (w - 1) * res_ttl * 1000 end
  if created + res_ttl * 1000 > now_ms then return {2} end
end

local tokens = ARGV[A_TOKENS] + 0
local max_streams = ARGV[A_MAX_STREAMS]
max_streams = max_streams == '-1' and -1 or max_streams + 0
local lease_ms = max_streams >= 0 and ARGV[A_LEASE_S] * 1000 or 0
local n = ARGV[A_BUCKET_COUNT]
n = n == '1' and 1 or n + 0
-- The bucket groups follow the quotas' (ARGV), their keys the quotas' (KEYS: K_QUOTA + nq *
-- K_QUOTA_STRIDE on).
local ab = A_QUOTA + nq * A_QUOTA_STRIDE

-- Buckets: first access is a full bucket (a third of it with warm-up); tokens = min(cap, tokens +
-- refill since ts).
local r  -- the gates that would refuse (refusal_note)
-- The buckets go in TIME's reply, read by now (sec, now_us, ts): its array part has their
-- slots for up to two, and each table a call makes costs Redis about a thousand instructions.
local buckets = t
for i = 1, n do
  local a = ab + (i - 1) * A_BUCKET_STRIDE
  local rate = (ARGV[a + A_BUCKET_REFILL] + 0)
  local cost = ARGV[a + A_BUCKET_COST]
  cost = cost == '1' and 1 or cost + 0
  local warmup = ARGV[a + A_BUCKET_WARMUP_S]
  local b = bucket_read(KEYS[K_QUOTA + nq * K_QUOTA_STRIDE + i - 1],
                        (ARGV[a + A_BUCKET_CAPACITY] + 0), rate,
                        warmup == '0' and 0 or warmup + 0, now_us, cost)
  buckets[i] = b
  if b[5] < cost then  -- the level now (lib_bucket.lua's bucket_read)
    r = refusal_note(r, ARGV[a + A_BUCKET_GATE], bucket_wait_ms(b, cost),
                     ARGV[a + A_BUCKET_SHADOW] == '1')
  end
end

-- Sliding windows: their keys follow the bucket keys, their ARGV the bucket groups. Their
-- routines are defined only when there are windows: each function the body defines is a closure
-- made on every call, used or not (admit_window is lib_window.lua's window_admit, or nil); so
-- is their table, each one made costing Redis.
-- Without windows the call ends with the buckets: two arguments fewer, each a string and a
-- table slot that cost Redis about 750 instructions (admit_lua_cost.sh).
local ws = ab + n * A_BUCKET_STRIDE
local m = ARGV[ws + A_WINDOWS_COUNT]
m = m and m + 0 or 0
local windows, admit_window
if m > 0 then
-- @include lib_window.lua
  windows = {}
  for j = 1, m do
    local a = ws + A_WINDOWS_STRIDE + (j - 1) * A_WINDOW_STRIDE
    local sw = window_read(KEYS[K_QUOTA + nq * K_QUOTA_STRIDE + n + j - 1],
                          (ARGV[a + A_WINDOW_LIMIT] + 0),
                          (ARGV[a + A_WINDOW_WINDOW_MS] + 0) * 1000, now_us)
    windows[j] = sw
    if sw.wait_ms > 0 then
      r = refusal_note(r, ARGV[a + A_WINDOW_GATE], sw.wait_ms, ARGV[a + A_WINDOW_SHADOW] == '1')
    end
  end
  admit_window = window_admit
end

-- The reservation is charged to every quota first and taken back below if anything refuses (a
-- key ends with the value and expiry it had, or gone if it was not there): one keyspace call
-- instead of a read and a write. A key just created by INCRBY has no expiry yet; one that was
-- there has one. quotas[4k] is quota k's count before this call, negative (-1 - count) when
-- INCRBY created its key: so one table entry says both.
local existed = ''
for k = 1, nq do
  local qkey, used, created = quotas[4 * k - 3]
  if tokens > 0 then
    used = redis.call('INCRBY', qkey, ARGV[A_TOKENS]) - tokens
    created = used == 0 and redis.call('TTL', qkey) == -1
    existed = existed .. (created and '0' or '1')
  else
    local raw = redis.call('GET', qkey)
    used, created = (raw or 0) + 0, false
    existed = existed .. (raw and '1' or '0')
  end
  quotas[4 * k] = created and -1 - used or used
  local qa = A_QUOTA + (k - 1) * A_QUOTA_STRIDE
  local budget = ARGV[qa + A_QUOTA_BUDGET]
  if budget ~= '-1' and used + tokens > budget + 0 then
    r = refusal_note(r, ARGV[qa + A_QUOTA_GATE], quotas[4 * k - 1] * 1000 - now_ms, quota_shadow)
  end
end

-- Concurrency: live leases are those with a deadline after now (expired ones are ignored here
-- and pruned only on the write path).
local live, first_ms = -1, 0
if max_streams >= 0 then
  live = redis.call('ZCOUNT', KEYS[K_LEASES], '(' .. now_ms, '+inf')
  if live > 0 then
    local f = redis.call('ZRANGEBYSCORE', KEYS[K_LEASES], '(' .. now_ms, '+inf', 'WITHSCORES',
                         'LIMIT', 0, 1)
    first_ms = f[2] - now_ms
  end
  if live >= max_streams then r = refusal_note(r, 'concurrency', first_ms, streams_shadow) end
end

-- Open reservations: the previous window's count goes when its hash expires.
if max_open >= 0 and (cur_open or 0) + (prev_open or 0) >= max_open then
  r = refusal_note(r, 'reservations', (cur_expire - res_ttl) * 1000 - now_ms, quota_shadow)
end

-- The reply's head: code, quota_existed, then per quota its count, seconds left and length; the
-- buckets' levels follow at qo + i. The three nils size the table for one quota, one bucket's
-- level and a snapshot's two entries (a constructor sizes it for every value listed, nil too),
-- so they do not grow it; the reply ends at the first nil.
local out = {0, existed, 0, 0, 0, nil, nil, nil}
for k = 1, nq do
  local used = quotas[4 * k]
  out[3 * k], out[3 * k + 1], out[3 * k + 2] =
      used < 0 and -1 - used or used, quotas[4 * k - 1] - sec, quotas[4 * k - 1] - quotas[4 * k - 2]
end
local qo = 2 + 3 * nq
-- The reply's tail (gate, retry_after_ms, then with a concurrency gate live_leases,
-- first_lease_ms): after the tokens, the counts and an admission's snapshot.
local tail = qo + 1 + n + m
local refused = r and r[1] ~= ''
-- The reservation's value. Numbers as '%d' text: Redis formats a number argument with '%.17g',
-- and Lua's concatenation with '%.14g', both through the floating-point formatter.
local v = not refused and (fresh and '-' or attempt) .. ' ' .. ARGV[A_TOKENS] .. ' ' ..
              string.format('%d', now_ms - w * res_ttl * 1000)
-- A late call's request_id found in the window: "x" (cancelled) or its reservation (it ran).
local taken = false
if late then
  if refused or redis.call('HSETNX', cur_key, rid, v) == 0 then
    taken = redis.call('HGET', cur_key, rid)
  end
end
if refused or taken then
  for k = 1, nq do
    if quotas[4 * k] < 0 then
      redis.call('DEL', quotas[4 * k - 3])
    elseif tokens > 0 then
      redis.call('DECRBY', quotas[4 * k - 3], ARGV[A_TOKENS])
    end
  end
  if taken then return {taken == 'x' and 3 or 2} end
  for i = 1, n do out[qo + i] = bucket_admit(buckets[i], sec, ts, true) end
  for j = 1, m do out[qo + n + j] = windows[j].count end
  out[tail], out[tail + 1] = r[1], r[2]
  if max_streams >= 0 then out[tail + 2], out[tail + 3] = live, first_ms end
  return out
end

-- Admitted: consume everything (an empty shadow bucket has nothing to give).
out[1] = 1
for i = 1, n do
  local old
  out[qo + i], old = bucket_admit(buckets[i], sec, ts)
  if snapshot then out[qo + n + m + i] = old end
end
for j = 1, m do
  out[qo + n + j] = windows[j].count
  admit_window(windows[j], now_us, ts, ARGV[ws + A_WINDOWS_MEMBER])
end
if snapshot then
  out[tail + n] = ts
  tail = tail + n + 1
end
if r or max_streams >= 0 then out[tail], out[tail + 1] = r and r[3] or '', r and r[4] or 0 end

-- Quota usage includes reservations; a counter outlives its period by one period, for reporting
-- and for the settles of reservations made in it (lib_quota.lua). Its expiry is set once, by the
-- period's first charge.
if tokens > 0 then
  for k = 1, nq do
    local used = quotas[4 * k]
    if used < 0 then
      local from, to = quotas[4 * k - 2], quotas[4 * k - 1]
      redis.call('EXPIREAT', quotas[4 * k - 3], to + (to - from))
      used = -1 - used
    end
    out[3 * k] = used + tokens
  end
end

if max_streams >= 0 then
  if snapshot then
    -- Prune a bounded number of expired leases and hand them to refund.lua, which puts them
    -- back when a global gate refuses (so the set stays bounded under steady traffic either way).
    local old = redis.call('ZRANGEBYSCORE', KEYS[K_LEASES], '-inf', now_ms, 'WITHSCORES',
                           'LIMIT', 0, 16)
    out[tail + 4] = #old / 2
    for j = 1, #old do out[tail + 4 + j] = old[j] end
    for j = 1, #old, 2 do redis.call('ZREM', KEYS[K_LEASES], old[j]) end
  else
    redis.call('ZREMRANGEBYSCORE', KEYS[K_LEASES], '-inf', now_ms)
  end
  local deadline = now_ms + lease_ms
  redis.call('ZADD', KEYS[K_LEASES], deadline, rid)
  if redis.call('PTTL', KEYS[K_LEASES]) < lease_ms + 1000 then
    redis.call('PEXPIRE', KEYS[K_LEASES], lease_ms + 1000)
  end
  out[tail + 2], out[tail + 3] = live + 1, first_ms == 0 and lease_ms or first_ms
end

-- One admission in 32 of a window that exists (the microseconds of TIME pick it) makes it a hash
-- table if it is not one yet (lib_reservation.lua): a field value longer than Redis keeps in a
-- listpack converts it, and is removed at once; Redis does not turn it back. The value's 72
-- bytes (kListpackBreakerBytes, control/redis/redis_client.h) must exceed
-- hash-max-listpack-value (64 by default); dripgate-control reads it at connect and warns when
-- they do not. Otherwise the window stays a listpack up to hash-max-listpack-entries fields:
-- slower, equally correct.
local convert = now_us % 32 == 0
if late then
  -- Open count 1: a new window, or one whose reservations were all closed (the same expiry);
  -- one that had fields before holds more than request_id and "#". The increment as text: a
  -- number argument Redis formats with '%.17g', about 2,000 instructions (admit_lua_cost.sh).
  local open = redis.call('HINCRBY', cur_key, '#', '1')
  if open == 1 then redis.call('EXPIREAT', cur_key, cur_expire) end
  if convert and (open > 1 or redis.call('HLEN', cur_key) > 2) then
    redis.call('HSET', cur_key, '~',
               '------------------------------------------------------------------------')
    redis.call('HDEL', cur_key, '~')
  end
  return out
end
local open = string.format('%d', (cur_open or 0) + 1)
if not (cur_open and convert) then
  redis.call('HSET', cur_key, rid, v, '#', open)
else
  redis.call('HSET', cur_key, rid, v, '#', open, '~',
             '------------------------------------------------------------------------')
  redis.call('HDEL', cur_key, '~')
end
if not cur_open then redis.call('EXPIREAT', cur_key, cur_expire) end
return out
