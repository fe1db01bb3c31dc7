#include "control/metrics/limit_tracker.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>

#include <string>
#include <thread>
#include <vector>

#include "control/metrics/metrics.h"

namespace dripgate::control {
namespace {

std::vector<std::string> tenants_of(const std::vector<LimitTracker::Row>& rows,
                                    std::string_view quota) {
  std::vector<std::string> out;
  for (const auto& r : rows)
    if (r.quota == quota) out.push_back(r.tenant);
  return out;
}

TEST(LimitTracker, KeepsTheLowestRatiosPerQuota) {
  LimitTracker t;
  LimitTracker::Slot s(t);
  // 20 tenants at ratios 0.95, 0.90, ..., 0.00 on the quota; one on the bucket.
  for (int i = 0; i < 20; ++i)
    s.note("t" + std::to_string(i), "quota", 1000.0 - 50.0 * (i + 1), 1000, 100);
  s.note("b", "tenant", 3, 10, 100);
  s.note("u", "user", 0, 10, 100);   // not a tenant's own limit
  s.note("m", "model", 0, 10, 100);  // nor a global one
  s.note("z", "quota", 5, 0, 100);   // no limit
  const auto rows = t.lowest(100);
  std::vector<std::string> want;
  for (int i = 19; i >= 10; --i) want.push_back("t" + std::to_string(i));
  EXPECT_EQ(tenants_of(rows, "quota"), want);
  EXPECT_EQ(tenants_of(rows, "tenant"), std::vector<std::string>{"b"});
  EXPECT_TRUE(tenants_of(rows, "user").empty());
  EXPECT_TRUE(tenants_of(rows, "model").empty());
  ASSERT_FALSE(rows.empty());
  EXPECT_EQ(rows[0].quota, "tenant");  // kQuotas' order
  EXPECT_DOUBLE_EQ(rows[0].ratio(), 0.3);
  EXPECT_DOUBLE_EQ(rows[1].ratio(), 0.0);  // t19: the quota spent
}

TEST(LimitTracker, ATenantFollowsItsLatestReading) {
  LimitTracker t;
  LimitTracker::Slot s(t);
  for (int i = 0; i < 10; ++i) s.note("t" + std::to_string(i), "tenant", i, 100, 0);
  // Full: a higher ratio stays out, a lower one takes the highest's place.
  s.note("high", "tenant", 50, 100, 1);
  s.note("low", "tenant", 0.5, 100, 1);
  auto names = tenants_of(t.lowest(1), "tenant");
  EXPECT_EQ(names.size(), LimitTracker::kTop);
  EXPECT_EQ(names[1], "low");
  EXPECT_EQ(std::count(names.begin(), names.end(), "high"), 0);
  EXPECT_EQ(std::count(names.begin(), names.end(), "t9"), 0);
  // t0 refilled: its entry moves with it (not a second entry).
  s.note("t0", "tenant", 90, 100, 2);
  const auto rows = t.lowest(2);
  names = tenants_of(rows, "tenant");
  EXPECT_EQ(names.back(), "t0");
  EXPECT_EQ(std::count(names.begin(), names.end(), "t0"), 1);
  // Remaining beyond the limit, or below 0, is clamped into 0..1.
  s.note("over", "concurrency", 12, 10, 2);
  s.note("under", "concurrency", -3, 10, 2);
  for (const auto& r : t.lowest(2)) {
    if (r.quota == "concurrency") {
      EXPECT_TRUE(r.ratio() >= 0 && r.ratio() <= 1) << r.tenant;
    }
  }
}

TEST(LimitTracker, OldReadingsAreForgottenAndMakeRoom) {
  LimitTracker t;
  LimitTracker::Slot s(t);
  for (int i = 0; i < 10; ++i) s.note("old" + std::to_string(i), "quota", 0, 100, 0);
  EXPECT_EQ(tenants_of(t.lowest(LimitTracker::kMaxAgeMs), "quota").size(), 10u);
  EXPECT_TRUE(tenants_of(t.lowest(LimitTracker::kMaxAgeMs + 1), "quota").empty());
  // A stale slot is free for a reading at any ratio.
  s.note("new", "quota", 99, 100, LimitTracker::kMaxAgeMs + 1);
  EXPECT_EQ(tenants_of(t.lowest(LimitTracker::kMaxAgeMs + 1), "quota"),
            std::vector<std::string>{"new"});
}

TEST(LimitTracker, TablesMergeOnReadLatestWins) {
  LimitTracker t;
  {
    LimitTracker::Slot a(t), b(t);
    a.note("x", "quota", 1, 100, 10);   // older: x nearly out
    b.note("x", "quota", 80, 100, 20);  // newer: x refilled (another worker saw it later)
    b.note("y", "quota", 40, 100, 5);
    const auto rows = t.lowest(20);
    ASSERT_EQ(tenants_of(rows, "quota"), (std::vector<std::string>{"y", "x"}));
    EXPECT_DOUBLE_EQ(rows[1].remaining, 80);
  }
  // A slot gone takes its table with it.
  EXPECT_TRUE(t.lowest(20).empty());
}

TEST(LimitTracker, ConcurrentWritersAndAReader) {
  LimitTracker t;
  std::vector<std::thread> writers;
  for (int w = 0; w < 4; ++w)
    writers.emplace_back([&t, w] {
      LimitTracker::Slot s(t);
      for (int i = 0; i < 20000; ++i)
        s.note("t" + std::to_string((i * 7 + w) % 100), "tenant", i % 100, 100, i);
    });
  for (int i = 0; i < 200; ++i) EXPECT_LE(t.lowest(i).size(), LimitTracker::kTop);
  for (auto& th : writers) th.join();
}

TEST(LimitTracker, RenderedAsABoundedGauge) {
  Metrics m;
  LimitTracker::Slot s(m.limits());
  const int64_t now = std::chrono::duration_cast<std::chrono::milliseconds>(
                          std::chrono::steady_clock::now().time_since_epoch())
                          .count();
  for (int i = 0; i < 50; ++i) s.note("t" + std::to_string(i), "quota", i, 100, now);
  const std::string text = m.render();
  EXPECT_NE(text.find("# TYPE dripgate_quota_remaining_ratio gauge\n"), std::string::npos);
  EXPECT_NE(text.find("dripgate_quota_remaining_ratio{tenant=\"t0\",quota=\"quota\"} 0\n"),
            std::string::npos);
  EXPECT_NE(text.find("dripgate_quota_remaining_ratio{tenant=\"t9\",quota=\"quota\"} 0.09\n"),
            std::string::npos);
  EXPECT_EQ(text.find("tenant=\"t10\""), std::string::npos);
  size_t series = 0;
  for (size_t at = 0;
       (at = text.find("\ndripgate_quota_remaining_ratio{", at)) != std::string::npos; ++at)
    ++series;
  EXPECT_EQ(series, LimitTracker::kTop);
}

}  // namespace
}  // namespace dripgate::control
