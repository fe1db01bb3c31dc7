#include "common/quota_period.h"

#include <gtest/gtest.h>

#include <random>

namespace dripgate::common {
namespace {

QuotaCalendar zone(const std::string& name) {
  auto c = QuotaCalendar::load(name);
  EXPECT_TRUE(c) << name;
  return c ? *c : *QuotaCalendar::load("UTC");
}

TEST(QuotaPeriod, NamesAndZonesTheDatabaseDoesNotKnowAreRefused) {
  EXPECT_EQ(parse_period("week"), Period::kWeek);
  EXPECT_EQ(period_name(Period::kMinute), "minute");
  EXPECT_EQ(parse_period("fortnight"), std::nullopt);
  EXPECT_EQ(parse_period("Month"), std::nullopt);
  EXPECT_FALSE(QuotaCalendar::load("Mars/Olympus_Mons"));
  EXPECT_FALSE(QuotaCalendar::load(""));
  EXPECT_FALSE(QuotaCalendar::load("../../etc/passwd"));
  EXPECT_TRUE(QuotaCalendar::load("Europe/Berlin"));
}

// In UTC a month's counter is named "YYYY-MM" as before, so the monthly quota keeps its keys.
TEST(QuotaPeriod, UtcMonthsAndLeapFebruary) {
  const QuotaCalendar utc = zone("UTC");
  EXPECT_EQ(utc.span(Period::kMonth, 1796661065), (PeriodSpan{1796083200, 1798761600, "2026-12"}));
  EXPECT_EQ(utc.span(Period::kMonth, 1834185600), (PeriodSpan{1832976000, 1835481600, "2028-02"}));
  EXPECT_EQ(utc.span(Period::kDay, 1796661065).label, "2026-12-07");
  EXPECT_EQ(utc.span(Period::kHour, 1796661065),
            (PeriodSpan{1796659200, 1796662800, "2026-12-07T16"}));
  EXPECT_EQ(utc.span(Period::kMinute, 1796661065),
            (PeriodSpan{1796661060, 1796661120, "2026-12-07T16:31"}));
}

// Days and hours in a zone with daylight saving: the spring day has 23 hours, the autumn day
// 25; the skipped hour has no period, the repeated one is one period of two hours.
TEST(QuotaPeriod, BerlinClockChanges) {
  const QuotaCalendar berlin = zone("Europe/Berlin");
  EXPECT_EQ(berlin.span(Period::kDay, 1774778400),
            (PeriodSpan{1774738800, 1774821600, "2026-03-29"}));
  EXPECT_EQ(berlin.span(Period::kDay, 1792926000),
            (PeriodSpan{1792879200, 1792969200, "2026-10-25"}));
  // 02:30 summer time and 02:30 winter time, an hour apart: the same hour, [00:00Z, 02:00Z).
  const PeriodSpan twice{1792886400, 1792893600, "2026-10-25T02"};
  EXPECT_EQ(berlin.span(Period::kHour, 1792888200), twice);
  EXPECT_EQ(berlin.span(Period::kHour, 1792891800), twice);
  // 01:30 winter time, then 03:00 summer time one second after 01:59:59.
  EXPECT_EQ(berlin.span(Period::kHour, 1774744200),
            (PeriodSpan{1774742400, 1774746000, "2026-03-29T01"}));
  EXPECT_EQ(berlin.span(Period::kHour, 1774746000),
            (PeriodSpan{1774746000, 1774749600, "2026-03-29T03"}));
  // 23:30 UTC on 30 November is 00:30 on 1 December in Berlin.
  EXPECT_EQ(berlin.span(Period::kMonth, 1796081400),
            (PeriodSpan{1796079600, 1798758000, "2026-12"}));
}

// ISO weeks start on Monday; the week-year is the Thursday's, so the first days of January
// may belong to the last week of the year before, and the last days of December to week 1.
TEST(QuotaPeriod, IsoWeeks) {
  const QuotaCalendar berlin = zone("Europe/Berlin");
  EXPECT_EQ(berlin.span(Period::kWeek, 1798801200),
            (PeriodSpan{1798412400, 1799017200, "2026-W53"}));
  EXPECT_EQ(zone("UTC").span(Period::kWeek, 1735534800),
            (PeriodSpan{1735516800, 1736121600, "2025-W01"}));
  EXPECT_EQ(zone("UTC").span(Period::kWeek, 1796661065).label, "2026-W50");
}

// Over two years of random seconds in three zones: every span holds its second, the periods
// around it touch, a period's name holds from its first second to its last and changes after.
TEST(QuotaPeriod, SpansTileTime) {
  std::mt19937_64 rng(47);
  std::uniform_int_distribution<int64_t> when(1767225600, 1830297600);  // 2026 .. 2027
  for (const char* name : {"UTC", "Europe/Berlin", "America/Santiago", "Australia/Lord_Howe"}) {
    const QuotaCalendar c = zone(name);
    for (int i = 0; i < 2000; ++i) {
      const int64_t s = when(rng);
      for (Period p :
           {Period::kMinute, Period::kHour, Period::kDay, Period::kWeek, Period::kMonth}) {
        auto [prev, cur, next] = c.around(p, s);
        ASSERT_LE(cur.start, s) << name << " " << period_name(p) << " " << s;
        ASSERT_LT(s, cur.end) << name << " " << period_name(p) << " " << s;
        ASSERT_EQ(prev.end, cur.start);
        ASSERT_EQ(cur.end, next.start);
        ASSERT_EQ(c.span(p, cur.start).label, cur.label);
        ASSERT_EQ(c.span(p, cur.end - 1).label, cur.label);
        ASSERT_NE(next.label, cur.label);
        ASSERT_NE(prev.label, cur.label);
      }
    }
  }
}

}  // namespace
}  // namespace dripgate::common
