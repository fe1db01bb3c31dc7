-- settle.lua: replaces a reservation with the actual token count, idempotently.
--
-- The first settle of a live reservation charges used += actual - reserved on the quota key of
-- the month the admission happened in (recorded in the reservation, same hash slot) and marks
-- the reservation settled; later settles change nothing and say so. A reservation that expired
-- (or never existed) changes nothing either: its reserved amount stays charged.
--
-- @keys reservation quota_prefix
-- @argv tokens
--
-- KEYS: reservation   hash "dg:{t:<tenant>}:r:<request_id>"
--       quota_prefix  "dg:{t:<tenant>}:q:" (only read, to report the current month's usage for
--                     an expired reservation; the month is appended here from TIME)
-- ARGV: tokens        the actual token count (integer >= 0)
--
-- Returns {settled (1/0), detail ("settled" | "already_settled" | "expired"), charged, used}:
-- charged = tokens charged for this request after the call, used = the quota counter after it.

-- @include lib_month.lua

local r = redis.call('HMGET', KEYS[K_RESERVATION], 'reserved', 'settled', 'charged', 'q', 'qx')
if not r[1] then
  local sec = tonumber(redis.call('TIME')[1])
  local used = tonumber(redis.call('GET', KEYS[K_QUOTA_PREFIX] .. utc_month(sec)) or '0')
  return {0, 'expired', 0, used}
end

if r[2] == '1' then
  return {0, 'already_settled', tonumber(r[3]), tonumber(redis.call('GET', r[4]) or '0')}
end

local actual = tonumber(ARGV[A_TOKENS])
local delta = actual - tonumber(r[1])
local used
if delta ~= 0 then
  used = redis.call('INCRBY', r[4], delta)
  if redis.call('TTL', r[4]) == -1 then redis.call('EXPIREAT', r[4], r[5]) end
else
  used = tonumber(redis.call('GET', r[4]) or '0')
end
redis.call('HSET', KEYS[K_RESERVATION], 'settled', 1, 'charged', actual)
return {1, 'settled', actual, used}
