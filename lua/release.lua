-- release.lua: ends a concurrency lease.
--
-- @keys leases
-- @argv request_id
--
-- KEYS: leases  zset "dg:{t:<tenant>}:leases"
-- ARGV: request_id
--
-- Returns 1 when a live lease was ended, 0 when there was none (never taken, released before,
-- or already past its deadline; an expired entry is removed all the same).

local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local s = redis.call('ZSCORE', KEYS[K_LEASES], ARGV[A_REQUEST_ID])
if not s then return 0 end
redis.call('ZREM', KEYS[K_LEASES], ARGV[A_REQUEST_ID])
if tonumber(s) > now_ms then return 1 end
return 0
