-- refund.lua: undoes an admit.lua admission after a global gate (gates.lua) refused it, so the
-- refused admission leaves no trace; and after its request was answered 503 (admit.lua's reply,
-- or gates.lua's, came past the request's deadline), so a failed request is charged nothing.
--
-- Buckets are restored byte for byte (the prior tk/ts, or the key deleted when it did not exist)
-- when nobody touched them since admit.lua wrote them; otherwise another admission has already
-- built on our write and only our token can be given back (tk + 1, capped at capacity). The
-- quota counter gets the reservation back (and disappears again if admit.lua created it), the
-- reservation is deleted, the lease removed and the expired leases admit.lua pruned put back,
-- so the lease zset is as before too.
--
-- @keys reservation leases bucket...
-- @argv request_id quota_existed bucket_count
-- @argv bucket...(capacity old_tk old_ts new_tk new_ts) pruned...(member score)
--
-- KEYS: reservation  hash "dg:{t:<tenant>}:r:<request_id>" (its field q names the quota key,
--                    same hash slot)
--       leases       zset
--       bucket...    the bucket hashes admit.lua consumed from
-- ARGV: request_id
--       quota_existed  "1" when the quota key existed before admit.lua
--       bucket_count   n
--       bucket...      per bucket: capacity, old tk, old ts ("" = no key), new tk, new ts
--       pruned...      to the end: the expired leases admit.lua pruned (none without a
--                      concurrency gate), as member, score
--
-- Returns 1 when the reservation was found and refunded, 0 otherwise.

local n = tonumber(ARGV[A_BUCKET_COUNT])
for i = 1, n do
  local a = A_BUCKET + (i - 1) * A_BUCKET_STRIDE
  local cap = tonumber(ARGV[a + A_BUCKET_CAPACITY])
  local old_tk, old_ts = ARGV[a + A_BUCKET_OLD_TK], ARGV[a + A_BUCKET_OLD_TS]
  local new_tk, new_ts = ARGV[a + A_BUCKET_NEW_TK], ARGV[a + A_BUCKET_NEW_TS]
  local k = KEYS[K_BUCKET + i - 1]
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
for p = A_BUCKET + n * A_BUCKET_STRIDE, #ARGV, A_PRUNED_STRIDE do
  redis.call('ZADD', KEYS[K_LEASES], ARGV[p + A_PRUNED_SCORE], ARGV[p + A_PRUNED_MEMBER])
end
redis.call('ZREM', KEYS[K_LEASES], ARGV[A_REQUEST_ID])

local r = redis.call('HMGET', KEYS[K_RESERVATION], 'reserved', 'q')
if not r[1] then return 0 end
local reserved = tonumber(r[1])
if reserved > 0 then
  local v = redis.call('DECRBY', r[2], reserved)
  if v == 0 and ARGV[A_QUOTA_EXISTED] == '0' then redis.call('DEL', r[2]) end
end
redis.call('DEL', KEYS[K_RESERVATION])
return 1
