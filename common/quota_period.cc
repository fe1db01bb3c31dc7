#include "common/quota_period.h"

#include <absl/time/civil_time.h>

#include <cstdio>

namespace dripgate::common {

namespace {

constexpr std::array<std::string_view, 5> kNames = {"minute", "hour", "day", "week", "month"};

// The local clock as a quota reads it at unix second s: the zone's civil time, except after a
// clock change that set it back, where it holds at the last second before the change until the
// zone's time catches up. Periods then follow one another in time, each named once: the repeated
// local half hour or hour counts to the period it repeats the end of, which lasts that much
// longer, rather than a period named twice at two times (and two counters under one key).
absl::CivilSecond quota_clock(int64_t s, absl::TimeZone tz) {
  const absl::Time t = absl::FromUnixSeconds(s);
  const absl::CivilSecond civil = absl::ToCivilSecond(t, tz);
  absl::TimeZone::CivilTransition back;
  if (tz.PrevTransition(t + absl::Seconds(1), &back) && back.from > back.to && civil < back.from)
    return back.from - 1;
  return civil;
}

// The first unix second whose quota clock reads c or later: c itself when it happens once (or
// at its first occurrence, when the clock repeats it), the clock change when it skips c.
int64_t unix_of(absl::CivilSecond c, absl::TimeZone tz) {
  const absl::TimeZone::TimeInfo at = tz.At(c);
  return absl::ToUnixSeconds(at.kind == absl::TimeZone::TimeInfo::SKIPPED ? at.trans : at.pre);
}

// The period that civil unit c is (a minute, an hour, a day, a month), named as Abseil writes it.
template <class Civil>
PeriodSpan civil_span(Civil c, absl::TimeZone tz) {
  return PeriodSpan{unix_of(c, tz), unix_of(c + 1, tz), absl::FormatCivilTime(c)};
}

// The ISO 8601 week of day d: its week-year is that of the week's Thursday, and its number
// counts the Thursdays of that year up to it.
std::string iso_week(absl::CivilDay monday) {
  const absl::CivilDay thursday = monday + 3;
  char buf[32];
  snprintf(buf, sizeof buf, "%04d-W%02d", static_cast<int>(thursday.year()),
           (absl::GetYearDay(thursday) - 1) / 7 + 1);
  return buf;
}

}  // namespace

std::optional<Period> parse_period(std::string_view name) {
  for (size_t i = 0; i < kNames.size(); ++i)
    if (kNames[i] == name) return static_cast<Period>(i);
  return std::nullopt;
}

std::string_view period_name(Period p) {
  return kNames[static_cast<size_t>(p)];
}

std::optional<QuotaCalendar> QuotaCalendar::load(const std::string& zone) {
  absl::TimeZone tz;
  // An empty name would load UTC; a zone is named or left out.
  if (zone.empty() || !absl::LoadTimeZone(zone, &tz)) return std::nullopt;
  return QuotaCalendar(tz, zone);
}

PeriodSpan QuotaCalendar::span(Period p, int64_t s) const {
  const absl::CivilSecond now = quota_clock(s, tz_);
  switch (p) {
    case Period::kMinute:
      return civil_span(absl::CivilMinute(now), tz_);
    case Period::kHour:
      return civil_span(absl::CivilHour(now), tz_);
    case Period::kDay:
      return civil_span(absl::CivilDay(now), tz_);
    case Period::kWeek: {
      const absl::CivilDay d(now);
      // Weekday's enumerators run monday = 0 .. sunday = 6.
      const absl::CivilDay monday = d - static_cast<int>(absl::GetWeekday(d));
      return PeriodSpan{unix_of(monday, tz_), unix_of(monday + 7, tz_), iso_week(monday)};
    }
    case Period::kMonth:
      break;
  }
  return civil_span(absl::CivilMonth(now), tz_);
}

std::array<PeriodSpan, 3> QuotaCalendar::around(Period p, int64_t s) const {
  PeriodSpan cur = span(p, s);
  PeriodSpan prev = span(p, cur.start - 1);
  PeriodSpan next = span(p, cur.end);
  return {std::move(prev), std::move(cur), std::move(next)};
}

}  // namespace dripgate::common
