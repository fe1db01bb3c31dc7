-- lib_month.lua: the UTC calendar month from Redis TIME, for the scripts that key quota
-- counters by month. Not a script of its own: Redis scripts cannot load files, so tools/embed.py
-- puts this text in place of a `-- @include lib_month.lua` line of a script.
--
-- civil-from-days (H. Hinnant), proleptic Gregorian, UTC.
-- (civil:begin/end mark the part admission_test.cc checks against the C++ calendar.)
-- civil:begin
local function civil_from_days(z)
  z = z + 719468
  local era = math.floor(z / 146097)
  local doe = z - era * 146097
  local yoe = math.floor((doe - math.floor(doe / 1460) + math.floor(doe / 36524) -
                          math.floor(doe / 146096)) / 365)
  local y = yoe + era * 400
  local doy = doe - (365 * yoe + math.floor(yoe / 4) - math.floor(yoe / 100))
  local mp = math.floor((5 * doy + 2) / 153)
  local m = mp < 10 and mp + 3 or mp - 9
  if m <= 2 then y = y + 1 end
  return y, m
end
local function days_from_civil(y, m)  -- day 1 of month m
  if m <= 2 then y = y - 1 end
  local era = math.floor(y / 400)
  local yoe = y - era * 400
  local mp = m > 2 and m - 3 or m + 9
  local doy = math.floor((153 * mp + 2) / 5)
  local doe = yoe * 365 + math.floor(yoe / 4) - math.floor(yoe / 100) + doy
  return era * 146097 + doe - 719468
end
-- civil:end

-- The month of unix second `sec` as "YYYY-MM", with its first second and the next month's.
local function utc_month(sec)
  local y, m = civil_from_days(math.floor(sec / 86400))
  local ny, nm = y, m + 1
  if nm > 12 then ny, nm = y + 1, 1 end
  return string.format('%04d-%02d', y, m), days_from_civil(y, m) * 86400,
         days_from_civil(ny, nm) * 86400
end
