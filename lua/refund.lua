-- refund.lua: undoes an admit.lua admission after a global gate (gates.lua) refused it, so the
-- refused admission leaves no trace.
--
-- Buckets are restored byte for byte (the prior tk/ts, or the key deleted when it did not exist)
-- when nobody touched them since admit.lua wrote them; otherwise another admission has already
-- built on our write and only our token can be given back (tk + 1, capped at capacity). The
-- quota counter gets the reservation back (and disappears again if admit.lua created it), the
-- reservation is deleted, the lease removed and the expired leases admit.lua pruned put back,
-- so the lease zset is as before too.
--
-- KEYS[1]  reservation hash "dg:{t:<tenant>}:r:<request_id>" (its field q names the quota key,
--          same hash slot)
-- KEYS[2]  leases zset
-- KEYS[3..2+n]  the bucket hashes admit.lua consumed from
-- ARGV[1]  request_id
-- ARGV[2]  "1" when the quota key existed before admit.lua
-- ARGV[3]  n
-- ARGV[4+5(i-1) ..]  per bucket i: capacity, old tk, old ts ("" = no key), new tk, new ts
-- ARGV[4+5n]  k, the number of expired leases admit.lua pruned (0 without concurrency gate)
-- ARGV[5+5n ..]  k pairs: member, score
--
-- Returns 1 when the reservation was found and refunded, 0 otherwise.

local n = tonumber(ARGV[3])
for i = 1, n do
  local a = 4 + (i - 1) * 5
  local cap, old_tk, old_ts, new_tk, new_ts = tonumber(ARGV[a]), ARGV[a + 1], ARGV[a + 2],
                                              ARGV[a + 3], ARGV[a + 4]
  local k = KEYS[2 + i]
  local b = redis.call('HMGET', k, 'tk', 'ts')
  if b[1] == new_tk and b[2] == new_ts then
    if old_tk == '' then
      redis.call('DEL', k)
    else
      redis.call('HSET', k, 'tk', old_tk, 'ts', old_ts)
    end
  elseif b[1] then
    redis.call('HSET', k, 'tk', string.format('%.17g', math.min(cap, tonumber(b[1]) + 1)))
  end
end

-- Put the pruned leases back before removing ours, so the set (and its TTL) never vanishes.
local p = 4 + 5 * n
local k = tonumber(ARGV[p] or '0')
for j = 1, k do
  redis.call('ZADD', KEYS[2], ARGV[p + 2 * j], ARGV[p + 2 * j - 1])
end
redis.call('ZREM', KEYS[2], ARGV[1])

local r = redis.call('HMGET', KEYS[1], 'reserved', 'q')
if not r[1] then return 0 end
local reserved = tonumber(r[1])
if reserved > 0 then
  local v = redis.call('DECRBY', r[2], reserved)
  if v == 0 and ARGV[2] == '0' then redis.call('DEL', r[2]) end
end
redis.call('DEL', KEYS[1])
return 1
