-- lib_quota.lua: the quota periods, for admit.lua, settle.lua, charge.lua and refund.lua. Not a
-- script of its own: Redis scripts cannot load files, so tools/embed.py puts this text in place
-- of a `-- @include lib_quota.lua` line of a script.
--
-- A plan has one or more token quotas, each over its own period of the plan's time zone
-- (quota_timezone, UTC by default): minute, hour, day, ISO week or calendar month. A quota's
-- counter is one key per period, "dg:{t:<tenant>}:q:<period name>" ("2026-12" for a month,
-- "2026-12-07" for a day: common/quota_period.h), and the period is that of Redis TIME (or of a
-- reservation's creation time). A script touches only keys it declares (a Redis Cluster routes a
-- call by its KEYS), so for each quota (the group quota...) the gateway declares the counters of
-- the three periods around its own clock, the previous, its current and the next (KEYS prev,
-- cur, next), with their bounds (ARGV prev_start, start, end, next_end: unix seconds; end is
-- where the next period starts), and the script picks the one its time lies in. The bounds come
-- from the gateway because a period in a time zone begins at a local midnight (or hour), which
-- Redis's Lua has no tz database to work out. Redis TIME stays the judge; a gateway clock a
-- period off finds no period and the call fails with an error that says so, writing nothing.
--
-- A counter expires one period after its own end (quota_expire_at): the previous period stays
-- readable, and a reservation made in it is corrected there, while the periods before are gone.

-- The counter of quota q (1-based, in the group's order) for unix second s, that period's first
-- second and the next period's. false when s lies before the declared periods (a period that is
-- over: its counter has expired or will, and no longer gates anything), nil when after them (the
-- gateway's clock is behind Redis's).
local function quota_period(q, s)
  local k = K_QUOTA + (q - 1) * K_QUOTA_STRIDE
  local a = A_QUOTA + (q - 1) * A_QUOTA_STRIDE
  local b2, b3 = ARGV[a + A_QUOTA_START] + 0, ARGV[a + A_QUOTA_END] + 0
  if s >= b2 and s < b3 then return KEYS[k + K_QUOTA_CUR], b2, b3 end
  if s < b2 then
    local b1 = ARGV[a + A_QUOTA_PREV_START] + 0
    if s >= b1 then return KEYS[k + K_QUOTA_PREV], b1, b2 end
    return false
  end
  local b4 = ARGV[a + A_QUOTA_NEXT_END] + 0
  if s < b4 then return KEYS[k + K_QUOTA_NEXT], b3, b4 end
  return nil
end

-- Sets a counter's expiry when it has none (just made by INCRBY): one period after the period's
-- end, the bounds quota_period gave.
local function quota_expire(key, start, stop)
  if redis.call('TTL', key) == -1 then redis.call('EXPIREAT', key, stop + (stop - start)) end
end

-- The reply when Redis TIME is too far from the gateway's clock for the keys it declared, as a
-- format: redis.error_reply(string.format(clock_error, sec)). A string, not a function, since
-- each function a script's body defines is a closure made on every call, needed or not; and one
-- literal, not a concatenation, which Lua 5.1 would redo on every call.
local clock_error =
  'ERR clock: Redis time %s is outside the quota periods or reservation windows the gateway declared from its clock; check both clocks'
