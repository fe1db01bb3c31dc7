-- ungates.lua: undoes one gates.lua call (one attempt) whose request was answered 503: its reply
-- came after the request's deadline, or never (the connection went away after the call was
-- written, so it may or may not have run). A request the client was told failed is charged
-- nothing.
--
-- gates.lua's marker tells: "ran" gives the token back to each bucket and becomes "undone"
-- (running this twice gives back once); no marker means the call has not run (it was refused,
-- or it may still run from a buffer of a stopped Redis): it becomes "cancelled", and gates.lua
-- refuses the call should it ever run.
--
-- Exact in tokens: what bucket_take stores is at most capacity - 1, and refill is computed from
-- ts when read, so tk + 1 is the level the bucket would have had without the take, whatever
-- other admissions did since (each took its own token). A bucket key that is gone expired because
-- the bucket was full again: nothing to give back.
--
-- @keys attempt bucket...
-- @argv attempt_ttl bucket_count bucket...(capacity)
--
-- KEYS: attempt    gates.lua's marker for the call
--       bucket...  the bucket hashes gates.lua took from
-- ARGV: attempt_ttl   seconds a "cancelled" marker is kept
--       bucket_count  n; bucket...  per bucket: its capacity
--
-- Returns the number of buckets given a token back.

local mark = redis.call('GET', KEYS[K_ATTEMPT])
if not mark then
  redis.call('SET', KEYS[K_ATTEMPT], 'cancelled', 'EX', ARGV[A_ATTEMPT_TTL])
  return 0
end
if mark ~= 'ran' then return 0 end
redis.call('SET', KEYS[K_ATTEMPT], 'undone', 'KEEPTTL')

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
