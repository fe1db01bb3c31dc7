-- lib_month.lua: the quota month, for admit.lua, settle.lua, charge.lua and refund.lua. Not a
-- script of its own: Redis scripts cannot load files, so tools/embed.py puts this text in place
-- of a `-- @include lib_month.lua` line of a script.
--
-- A tenant's quota counter is one key per calendar month of its plan's time zone
-- (quota_timezone, UTC by default), "dg:{t:<tenant>}:q:YYYY-MM", and the month is that of Redis
-- TIME (or of a reservation's creation time). A script touches only keys it declares (a Redis
-- Cluster routes a call by its KEYS), so the gateway declares the counters of the three months
-- around its own clock, the previous, its current and the next (KEYS quota_prev, quota_cur,
-- quota_next), with their bounds (ARGV prev_start, month_start, month_end, next_end: unix
-- seconds; month_end is where the next month starts), and the script picks the one its time lies
-- in. The bounds come from the gateway because a month in a time zone begins at its local
-- midnight, which Redis's Lua has no tz database to work out. Redis TIME stays the judge; a
-- gateway clock about a month off finds no month and the call fails with an error that says so,
-- writing nothing.

-- The quota key of unix second s, with that month's first second and the next month's; nil when
-- s lies outside the three declared months.
local function quota_month(s)
  local b2, b3 = ARGV[A_MONTH_START] + 0, ARGV[A_MONTH_END] + 0
  if s >= b2 and s < b3 then return KEYS[K_QUOTA_CUR], b2, b3 end
  if s < b2 then
    local b1 = ARGV[A_PREV_START] + 0
    if s >= b1 then return KEYS[K_QUOTA_PREV], b1, b2 end
  else
    local b4 = ARGV[A_NEXT_END] + 0
    if s < b4 then return KEYS[K_QUOTA_NEXT], b3, b4 end
  end
  return nil
end

-- The reply when Redis TIME is too far from the gateway's clock for the keys it declared, as a
-- format: redis.error_reply(string.format(clock_error, sec)). A string, not a function, since
-- each function a script's body defines is a closure made on every call, needed or not; and one
-- literal, not a concatenation, which Lua 5.1 would redo on every call.
local clock_error =
  'ERR clock: Redis time %s is outside the quota months or reservation windows the gateway declared from its clock; check both clocks'
