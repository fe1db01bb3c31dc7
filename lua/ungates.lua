-- ungates.lua: gives back the token a gates.lua call took from each global bucket, for a call
-- whose request was already answered 503 (its reply came after the request's deadline), so a
-- request the client was told failed is charged nothing.
--
-- Exact in tokens: what bucket_take stores is at most capacity - 1, and refill is computed from
-- ts when read, so tk + 1 is the level the bucket would have had without the take, whatever
-- other admissions did since (each took its own token). A key that is gone expired because the
-- bucket was full again: nothing to give back. Runs only when gates.lua admitted (code 1).
--
-- @keys bucket...
-- @argv bucket_count bucket...(capacity)
--
-- KEYS: bucket...  the bucket hashes gates.lua took from
-- ARGV: bucket_count n; bucket...  per bucket: its capacity
--
-- Returns the number of buckets given a token back.

local n = tonumber(ARGV[A_BUCKET_COUNT])
local given = 0
for i = 1, n do
  local a = A_BUCKET + (i - 1) * A_BUCKET_STRIDE
  local k = KEYS[K_BUCKET + i - 1]
  local tk = redis.call('HGET', k, 'tk')
  if tk then
    local cap = tonumber(ARGV[a + A_BUCKET_CAPACITY])
    redis.call('HSET', k, 'tk', string.format('%.17g', math.min(cap, tonumber(tk) + 1)))
    given = given + 1
  end
end
return given
