// The periods a quota is counted over (minute, hour, day, ISO week from Monday, calendar month)
// in a time zone of the system's tz database: where a period begins and ends in unix seconds,
// and the name its counter key carries. The scripts cannot know a time zone (Redis's Lua has no
// tz database), so the gateway works out the bounds here and hands them over with the keys.
//
// Abseil's time zones (cctz) rather than the C++20 <chrono> zones or the C library's: the
// libstdc++ of the supported toolchains (GCC 12) has no std::chrono::tzdb, and localtime_r
// reads one process-wide TZ, which a daemon serving plans in several zones would have to switch
// under a lock on every call. absl::TimeZone reads the same /usr/share/zoneinfo, once per zone,
// and is a small immutable handle any thread may use.
#pragma once

#include <absl/time/time.h>

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace dripgate::common {

enum class Period { kMinute, kHour, kDay, kWeek, kMonth };

// "minute", "hour", "day", "week", "month"; nullopt for any other name.
std::optional<Period> parse_period(std::string_view name);
std::string_view period_name(Period p);

// One period: its first second, the first second of the next one (unix s) and its name in a
// counter key, in local civil time: "2026-12-07T16:31" (minute), "2026-12-07T16" (hour),
// "2026-12-07" (day), "2026-W50" (ISO week-year and week), "2026-12" (month).
struct PeriodSpan {
  int64_t start = 0, end = 0;
  std::string label;

  bool operator==(const PeriodSpan&) const = default;
};

class QuotaCalendar {
 public:
  // The zone of the tz database named `zone` ("UTC", "Europe/Berlin"); nullopt when the
  // database does not know it.
  static std::optional<QuotaCalendar> load(const std::string& zone);

  // The period of kind p holding unix second s. A period whose first local second a clock
  // change skips begins at the change; the local time a change repeats (an autumn hour) counts
  // to the period it first belonged to, which lasts that much longer. So the periods tile time:
  // the span holds s, the next one starts at its end, and a name is never used twice.
  PeriodSpan span(Period p, int64_t s) const;
  // The period before the one holding s, that one, and the one after.
  std::array<PeriodSpan, 3> around(Period p, int64_t s) const;
  const std::string& zone() const { return name_; }

 private:
  QuotaCalendar(absl::TimeZone tz, std::string name) : tz_(tz), name_(std::move(name)) {}
  absl::TimeZone tz_;
  std::string name_;
};

}  // namespace dripgate::common
