-- lib_month.lua: the quota month, for admit.lua, settle.lua and refund.lua. Not a script of its
-- own: Redis scripts cannot load files, so tools/embed.py puts this text in place of a
-- `-- @include lib_month.lua` line of a script.
--
-- A tenant's quota counter is one key per UTC calendar month, "dg:{t:<tenant>}:q:YYYY-MM", and the
-- month is that of Redis TIME (or of a reservation's creation time). A script touches only keys
-- it declares (a Redis Cluster routes a call by its KEYS), so the gateway declares the counters
-- of the three months around its own clock, the previous, its current and the next (KEYS
-- quota_prev, quota_cur, quota_next), with the bounds of its current month (ARGV month_start,
-- month_end: unix seconds), and the script picks the one its time lies in. Redis TIME stays the
-- judge; a gateway clock about a month off finds no month and the call fails with an error that
-- says so, writing nothing.

-- The quota key of unix second s, with that month's first second and the next month's; nil when
-- s lies outside the three declared months. The bounds of the months before and after are
-- needed only near a month's edge, so they are worked out here from the calendar, not passed:
-- two arguments fewer on every call, each a string and a table slot for Redis.
local function quota_month(s)
  local b2, b3 = ARGV[A_MONTH_START] + 0, ARGV[A_MONTH_END] + 0
  if s >= b2 and s < b3 then return KEYS[K_QUOTA_CUR], b2, b3 end
  -- The days of the UTC month of unix second x, in the proleptic Gregorian calendar (as the
  -- gateway's): the month from the day number (H. Hinnant's civil_from_days, its year starting
  -- in March: mp 0 is March, 11 February), then its length. Defined here, not at the top level,
  -- where it would be a closure made on every call.
  local function month_days(x)
    local z = math.floor(x / 86400) + 719468
    local doe = z % 146097
    local yoe = math.floor((doe - math.floor(doe / 1460) + math.floor(doe / 36524) -
                            math.floor(doe / 146096)) / 365)
    local doy = doe - (365 * yoe + math.floor(yoe / 4) - math.floor(yoe / 100))
    local mp = math.floor((5 * doy + 2) / 153)
    if mp == 11 then
      local y = yoe + (z - doe) / 146097 * 400 + 1
      return (y % 4 == 0 and (y % 100 ~= 0 or y % 400 == 0)) and 29 or 28
    end
    return 31 - mp % 5 % 2  -- March to January: 31 30 31 30 31, 31 30 31 30 31, 31
  end
  if s < b2 then
    local b1 = b2 - month_days(b2 - 1) * 86400
    if s >= b1 then return KEYS[K_QUOTA_PREV], b1, b2 end
  else
    local b4 = b3 + month_days(b3) * 86400
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
