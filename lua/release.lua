-- release.lua: ends a concurrency lease.
--
-- KEYS[1]  leases zset "dg:{t:<tenant>}:leases"
-- ARGV[1]  request_id
--
-- Returns 1 when a live lease was ended, 0 when there was none (never taken, released before,
-- or already past its deadline; an expired entry is removed all the same).

local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local s = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not s then return 0 end
redis.call('ZREM', KEYS[1], ARGV[1])
if tonumber(s) > now_ms then return 1 end
return 0
