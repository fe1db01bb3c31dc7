// keys::TimeKeys: the names of one build, and the thread's table of builds, which must give the
// names a fresh formatting would whenever the clock, the month or the configuration moved.
#include "control/admission/keys.h"

#include <gtest/gtest.h>

#include <string>

namespace dripgate::control::keys {
namespace {

constexpr int64_t kNow = 1'700'000'000;  // 2023-11-14T22:13:20Z

// What a build must hold, formatted here from scratch.
void expect_names(const TimeKeys& k, const std::string& tenant, int64_t ttl, int64_t now) {
  const Months m = months_around(now);
  const std::string q = quota_prefix(tenant), r = reservations(tenant);
  ASSERT_EQ(k.nq, 1u);
  EXPECT_EQ(k.quotas[0].keys[0], q + m.prev.name);
  EXPECT_EQ(k.quotas[0].keys[1], q + m.cur.name);
  EXPECT_EQ(k.quotas[0].keys[2], q + m.next.name);
  const int64_t base = now / ttl;
  for (int i = 0; i < 5; ++i)
    EXPECT_EQ(k.windows[static_cast<size_t>(i)],
              r + std::to_string(ttl) + ":" + std::to_string(base - 2 + i));
  EXPECT_EQ(k.base, std::to_string(base));
  EXPECT_EQ(k.quotas[0].bounds[0], m.prev.start_s);
  EXPECT_EQ(k.quotas[0].bounds[1], m.cur.start_s);
  EXPECT_EQ(k.quotas[0].bounds[2], m.cur.end_s);
  EXPECT_EQ(k.quotas[0].bounds[3], m.next.end_s);
}

void build(TimeKeys& k, const std::string& tenant, int64_t ttl, int64_t now) {
  const Months m = months_around(now);
  const Months* periods[] = {&m};
  k.build(quota_prefix(tenant), reservations(tenant), std::to_string(ttl), ttl, now, periods);
}

// A quota's months in its time zone: 23:30 UTC on 30 November is December in Berlin, whose
// months begin at local midnight; in UTC the months are month_of's.
TEST(TimeKeys, MonthsInAQuotaTimeZone) {
  const auto berlin = common::QuotaCalendar::load("Europe/Berlin");
  ASSERT_TRUE(berlin);
  const int64_t s = 1796081400;  // 2026-11-30T23:30:00Z
  const Months m = months_around(*berlin, s);
  EXPECT_EQ(m.prev.name, "2026-11");
  EXPECT_EQ(m.cur.name, "2026-12");
  EXPECT_EQ(m.next.name, "2027-01");
  EXPECT_EQ(m.prev.start, 1793487600);  // 2026-11-01T00:00+01:00
  EXPECT_EQ(m.cur.start, 1796079600);   // 2026-12-01T00:00+01:00
  EXPECT_EQ(m.cur.end, 1798758000);     // 2027-01-01T00:00+01:00
  EXPECT_EQ(m.next.end, 1801436400);    // 2027-02-01T00:00+01:00
  EXPECT_EQ(m.cur.end_s, "1798758000");
  EXPECT_EQ(&current_months(*berlin, s), &current_months(*berlin, s + 60));
  EXPECT_EQ(current_months(*berlin, s).cur.name, "2026-12");
  EXPECT_EQ(months_around(s).cur.name, "2026-11");
  const auto utc = common::QuotaCalendar::load("UTC");
  for (int64_t t : {kNow, s, int64_t{1834185600}}) {
    const Months a = months_around(*utc, t), b = months_around(t);
    EXPECT_EQ(a.cur.name, b.cur.name);
    EXPECT_EQ(a.prev.start, b.prev.start);
    EXPECT_EQ(a.next.end, b.next.end);
  }
}

// A plan with a daily and a monthly quota: each quota's counters are named after its own periods,
// in its order, and a new day alone formats the build anew (the months are the same).
TEST(TimeKeys, EachQuotaNamesItsOwnPeriods) {
  const auto utc = common::QuotaCalendar::load("UTC");
  ASSERT_TRUE(utc);
  auto build2 = [&](TimeKeys& k, int64_t now) {
    const Months* periods[] = {&current_periods(*utc, common::Period::kDay, now),
                               &current_periods(*utc, common::Period::kMonth, now)};
    k.build(quota_prefix("acme"), reservations("acme"), "86400", 86400, now, periods);
  };
  TimeKeys a, b, c;
  build2(a, kNow);
  ASSERT_EQ(a.nq, 2u);
  EXPECT_EQ(a.quotas[0].keys[0], "dg:{t:acme}:q:2023-11-13");
  EXPECT_EQ(a.quotas[0].keys[1], "dg:{t:acme}:q:2023-11-14");
  EXPECT_EQ(a.quotas[0].keys[2], "dg:{t:acme}:q:2023-11-15");
  EXPECT_EQ(a.quotas[0].bounds[1], "1699920000");  // 2023-11-14T00:00Z
  EXPECT_EQ(a.quotas[0].bounds[2], "1700006400");
  EXPECT_EQ(a.quotas[1].keys[1], "dg:{t:acme}:q:2023-11");
  EXPECT_EQ(a.quotas[1].bounds[2], "1701388800");  // 2023-12-01T00:00Z
  // The same day and reservation window (86400 s windows begin at UTC midnight): shared.
  build2(b, kNow + 60);
  EXPECT_EQ(a.buffer(), b.buffer());
  // Past midnight: a new window and a new day; the month's names stay.
  build2(c, 1700006400);
  EXPECT_NE(c.buffer(), a.buffer());
  EXPECT_EQ(c.quotas[0].keys[1], "dg:{t:acme}:q:2023-11-15");
  EXPECT_EQ(c.quotas[1].keys[1], "dg:{t:acme}:q:2023-11");
  EXPECT_EQ(a.quotas[0].keys[1], "dg:{t:acme}:q:2023-11-14");  // the old build keeps its names
}

TEST(TimeKeys, NamesTheMonthsAndWindowsAroundTheClock) {
  TimeKeys k;
  build(k, "acme", 600, kNow);
  EXPECT_EQ(k.quotas[0].keys[1], "dg:{t:acme}:q:2023-11");
  EXPECT_EQ(k.windows[2], "dg:{t:acme}:r:600:2833333");
  expect_names(k, "acme", 600, kNow);
}

TEST(TimeKeys, BuildsInTheSameWindowShareOneBuffer) {
  TimeKeys a, b;
  build(a, "acme", 600, kNow);
  build(b, "acme", 600, kNow + 1);
  EXPECT_EQ(a.buffer(), b.buffer());
  expect_names(b, "acme", 600, kNow + 1);
}

TEST(TimeKeys, TheNextWindowIsFormattedAnewAndTheOldBuildKeepsItsNames) {
  const int64_t start = kNow / 600 * 600;
  TimeKeys a, b, c;
  build(a, "acme", 600, start + 599);
  build(b, "acme", 600, start + 600);
  EXPECT_NE(a.buffer(), b.buffer());
  expect_names(a, "acme", 600, start + 599);
  expect_names(b, "acme", 600, start + 600);
  // Back in the earlier window (another thread's clock, say): right again.
  build(c, "acme", 600, start + 599);
  expect_names(c, "acme", 600, start + 599);
  expect_names(b, "acme", 600, start + 600);
}

TEST(TimeKeys, ANewMonthNamesItsCounters) {
  const Months m = months_around(kNow);
  TimeKeys a, b;
  // A ttl the month's end is inside a window of: only the months tell the two builds apart.
  const int64_t ttl = 7 * 86400;
  build(a, "acme", ttl, m.cur.end - 1);
  build(b, "acme", ttl, m.cur.end);
  ASSERT_EQ((m.cur.end - 1) / ttl, m.cur.end / ttl);
  expect_names(a, "acme", ttl, m.cur.end - 1);
  expect_names(b, "acme", ttl, m.cur.end);
  EXPECT_EQ(b.quotas[0].keys[1], "dg:{t:acme}:q:2023-12");
}

TEST(TimeKeys, AnotherTtlOrTenantIsFormattedAnew) {
  TimeKeys a, b, c, d;
  build(a, "acme", 600, kNow);
  // A reload that changes reservation_ttl_s.
  build(b, "acme", 300, kNow);
  expect_names(b, "acme", 300, kNow);
  build(c, "globex", 600, kNow);
  expect_names(c, "globex", 600, kNow);
  build(d, "acme", 600, kNow);
  expect_names(d, "acme", 600, kNow);
  expect_names(a, "acme", 600, kNow);
}

TEST(TimeKeys, ABufferNoBuildHoldsIsReusedAndOneStillHeldIsNot) {
  const int64_t start = kNow / 600 * 600;
  {
    TimeKeys gone;
    build(gone, "acme", 600, start);
  }
  TimeKeys held;
  build(held, "acme", 600, start + 600);
  TimeKeys next;
  build(next, "acme", 600, start + 1200);
  expect_names(held, "acme", 600, start + 600);
  expect_names(next, "acme", 600, start + 1200);
}

}  // namespace
}  // namespace dripgate::control::keys
