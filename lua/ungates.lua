-- ungates.lua: undoes one gates.lua call (one attempt) whose request was not admitted: another
-- part of the admission refused or failed, or its own reply came after the request's deadline or
-- never (the connection went away after the call was written, so it may or may not have run). A
-- request the client was told failed or refused is charged nothing.
--
-- gates.lua's marker tells: "ran" gives what it took back to each bucket (lib_bucket.lua's
-- bucket_untake: byte for byte from gates.lua's snapshot when nobody touched the bucket since,
-- else tk + cost) and removes the marker (and the taken record), so that a refused admission
-- leaves no key behind; running this again finds no marker and only writes "cancelled", giving nothing back twice. No marker
-- means the call has not run (it may still run from a buffer of a stopped Redis): it becomes
-- "cancelled", and gates.lua refuses the call should it ever run.
--
-- @keys attempt taken bucket...
-- @argv attempt_ttl bucket_count bucket...(capacity cost old_tk old_ts new_tk new_ts)
--
-- @argv windows...(count member)
-- KEYS: attempt    gates.lua's marker for the call
--       taken      gates.lua's taken record (a model_tokens gate; else the attempt key again),
--                  deleted with the marker
--       bucket...  the bucket hashes gates.lua took from, then its sliding windows' sorted
--                  sets (windows.count of them)
-- ARGV: attempt_ttl   seconds a "cancelled" marker is kept
--       bucket_count  n; bucket...  per bucket: its capacity, the tokens gates.lua took (its
--                     cost), then old tk, old ts ("" = no key), new tk, new ts from gates.lua's snapshot; all but capacity "" when
--                     there is none (its reply was lost)
--       windows       after the buckets: count, and the member gates.lua added to each window,
--                     removed here (lib_window.lua)
--
-- Returns the number of buckets given their tokens back and of window members removed.

local mark = redis.call('GET', KEYS[K_ATTEMPT])
if not mark then
  redis.call('SET', KEYS[K_ATTEMPT], 'cancelled', 'EX', ARGV[A_ATTEMPT_TTL])
  return 0
end
if mark ~= 'ran' then return 0 end
redis.call('DEL', KEYS[K_ATTEMPT], KEYS[K_TAKEN])
-- @include lib_bucket.lua
local n = tonumber(ARGV[A_BUCKET_COUNT])
local given = 0
for i = 1, n do
  local a = A_BUCKET + (i - 1) * A_BUCKET_STRIDE
  given = given + bucket_untake(KEYS[K_BUCKET + i - 1], tonumber(ARGV[a + A_BUCKET_CAPACITY]),
                                tonumber(ARGV[a + A_BUCKET_COST]), ARGV[a + A_BUCKET_OLD_TK],
                                ARGV[a + A_BUCKET_OLD_TS], ARGV[a + A_BUCKET_NEW_TK],
                                ARGV[a + A_BUCKET_NEW_TS])
end
-- @include lib_window.lua
local ws = A_BUCKET + n * A_BUCKET_STRIDE
for j = 1, tonumber(ARGV[ws + A_WINDOWS_COUNT]) do
  given = given + window_untake(KEYS[K_BUCKET + n + j - 1], ARGV[ws + A_WINDOWS_MEMBER])
end
return given
