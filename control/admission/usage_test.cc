// A quota's projected exhaustion on given numbers (no clock): the period's average so far,
// carried forward from now.
#include "control/admission/usage.h"

#include <gtest/gtest.h>

#include "control/admission/keys.h"

namespace dripgate::control::usage {
namespace {

// December 2026 in UTC: 2026-12-01T00:00:00Z .. 2027-01-01T00:00:00Z.
constexpr int64_t kStart = 1796083200, kEnd = 1798761600;

QuotaUsage usage(int64_t used, int64_t limit) {
  QuotaUsage u;
  u.spec.limit = limit;
  u.span = {kStart, kEnd, "2026-12"};
  u.used = used;
  return u;
}

TEST(Project, AtThePeriodsAverageSoFar) {
  // A tenth of a million tokens in the first 10 days: the rest in 90 more, after the month.
  QuotaUsage u = usage(100000, 1000000);
  project(u, kStart + 10 * 86400);
  EXPECT_DOUBLE_EQ(u.rate_per_s, 100000.0 / (10 * 86400));
  EXPECT_FALSE(u.exhausts_at);
  // Half in 10 days: the other half in 10 more, within the month.
  u = usage(500000, 1000000);
  project(u, kStart + 10 * 86400);
  ASSERT_TRUE(u.exhausts_at);
  EXPECT_EQ(*u.exhausts_at, kStart + 20 * 86400);
  EXPECT_EQ(u.remaining(), 500000);
}

TEST(Project, EdgesOfThePeriodAndTheBudget) {
  QuotaUsage u = usage(0, 1000);  // nothing used: never at this rate
  project(u, kStart + 3600);
  EXPECT_EQ(u.rate_per_s, 0);
  EXPECT_FALSE(u.exhausts_at);
  u = usage(1000, 1000);  // spent: now
  project(u, kStart + 3600);
  EXPECT_EQ(u.exhausts_at, kStart + 3600);
  EXPECT_EQ(u.remaining(), 0);
  u = usage(1500, 1000);  // past it (a stream's charges): now, nothing remaining
  project(u, kStart + 3600);
  EXPECT_EQ(u.exhausts_at, kStart + 3600);
  EXPECT_EQ(u.remaining(), 0);
  // Two seconds into the month, 100 tokens: averaged over a minute, not two seconds (which
  // would say 50 a second, the budget gone in 18 s).
  u = usage(100, 1000);
  project(u, kStart + 2);
  EXPECT_DOUBLE_EQ(u.rate_per_s, 100.0 / kMinRateWindowS);
  EXPECT_EQ(u.exhausts_at, kStart + 2 + 540);
  // Rounded up to the second it is reached, and not after the period's end.
  u = usage(3, 10);
  project(u, kStart + 90);  // 1/30 a second: 7 left take 210 s
  EXPECT_EQ(u.exhausts_at, kStart + 90 + 210);
  u = usage(999, 1000);
  project(u, kEnd - 1);  // one left, the month ends first
  EXPECT_FALSE(u.exhausts_at);
}

TEST(QuotaCounter, IsTheTimeKeysName) {
  EXPECT_EQ(keys::quota_counter(keys::quota_prefix("ws-1"), "2026-12"),
            keys::quota("ws-1", "2026-12"));
}

}  // namespace
}  // namespace dripgate::control::usage
