-- settle.lua: replaces a reservation with the actual token count, idempotently.
--
-- The first settle of a live reservation charges used += actual - reserved on the quota key of
-- the month the admission happened in (that of its creation time) and marks the reservation
-- settled; later settles change nothing and say so. A reservation that expired (or never
-- existed) changes nothing either: its reserved amount stays charged.
--
-- @keys reservations quota_prefix
-- @argv request_id reservation_ttl tokens
--
-- KEYS: reservations  "dg:{t:<tenant>}:r:", the prefix of the reservation windows
--                     (lib_reservation.lua)
--       quota_prefix  "dg:{t:<tenant>}:q:" (the month is appended here)
-- ARGV: request_id
--       reservation_ttl  the plan's reservation_ttl_s
--       tokens        the actual token count (integer >= 0)
--
-- Returns {settled (1/0), detail ("settled" | "already_settled" | "expired"), charged, used}:
-- charged = tokens charged for this request after the call, used = the quota counter after it.

-- @include lib_month.lua
-- @include lib_reservation.lua

local t = redis.call('TIME')
local sec = tonumber(t[1])
local now_ms = sec * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[A_RESERVATION_TTL])
local rid = ARGV[A_REQUEST_ID]
local cur_key, prev_key, _, w = res_windows(KEYS[K_RESERVATIONS], ttl, sec)
local key, v, _, reserved, created, charged =
    res_find(cur_key, prev_key, w, rid, ttl, now_ms)
if not key then
  local used = tonumber(redis.call('GET', KEYS[K_QUOTA_PREFIX] .. utc_month(sec)) or '0')
  return {0, 'expired', 0, used}
end

local month, _, next_month = utc_month(math.floor(created / 1000))
local qkey = KEYS[K_QUOTA_PREFIX] .. month
if charged then
  return {0, 'already_settled', charged, tonumber(redis.call('GET', qkey) or '0')}
end

local actual = tonumber(ARGV[A_TOKENS])
local delta = actual - reserved
local used
if delta ~= 0 then
  used = redis.call('INCRBY', qkey, delta)
  if redis.call('TTL', qkey) == -1 then redis.call('EXPIREAT', qkey, next_month + 32 * 86400) end
else
  used = tonumber(redis.call('GET', qkey) or '0')
end
redis.call('HSET', key, rid, v .. ' ' .. ARGV[A_TOKENS])
redis.call('HINCRBY', key, '#', -1)
return {1, 'settled', actual, used}
