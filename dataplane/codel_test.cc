// CoDel's decisions on an injected clock (1 tick = 1 ns) against the control law of RFC 8289:
// after the sojourn has stood above target for one interval, drop once, then the k-th drop
// of the dropping state interval / sqrt(k) after the one before.
#include "dataplane/codel.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace dripgate::dataplane {
namespace {

constexpr uint64_t kMs = 1'000'000;

CodelParams params(bool ecn = false) {
  CodelParams p;
  p.target = 5 * kMs;
  p.interval = 100 * kMs;
  p.ecn = ecn;
  return p;
}

// Dequeues one head every `step` from 0 to `end` with a standing sojourn, as a caller does:
// a dropped head is followed by the next head in the same dequeue. Returns the drop times.
std::vector<uint64_t> drop_times(Codel& c, const CodelParams& p, uint64_t step, uint64_t end,
                                 uint64_t sojourn) {
  std::vector<uint64_t> drops;
  for (uint64_t t = 0; t <= end; t += step) {
    while (c.on_dequeue(p, t, sojourn, 1'000'000, false) == Codel::Verdict::kDrop)
      drops.push_back(t);
  }
  return drops;
}

TEST(Codel, AStandingQueueIsDroppedOnTheTextbookControlLaw) {
  const CodelParams p = params();
  Codel c;
  const uint64_t step = kMs / 4;  // a dequeue every 250 us
  const std::vector<uint64_t> drops = drop_times(c, p, step, 2000 * kMs, 20 * kMs);
  // The textbook schedule: first above target at t = 0, so the first drop at 0 + interval;
  // after the k-th drop (count = k) the next one interval / sqrt(k) later. Each drop happens
  // at the first dequeue at or after its time.
  std::vector<uint64_t> expected;
  double next = 100.0 * kMs;
  for (int k = 1; next <= 2000.0 * kMs; ++k) {
    const uint64_t at = static_cast<uint64_t>(std::ceil(next / step)) * step;
    expected.push_back(at);
    next += 100.0 * kMs / std::sqrt(double(k));
  }
  ASSERT_GE(expected.size(), 30u);
  ASSERT_EQ(drops.size(), expected.size());
  for (size_t i = 0; i < drops.size(); ++i) EXPECT_EQ(drops[i], expected[i]) << "drop " << i;
  EXPECT_TRUE(c.dropping());
  EXPECT_EQ(c.count(), drops.size());
}

TEST(Codel, OnlyOneDropPerDequeueWhileOnSchedule) {
  const CodelParams p = params();
  Codel c;
  EXPECT_EQ(c.on_dequeue(p, 0, 20 * kMs, 100'000, false), Codel::Verdict::kKeep);
  // Entering the dropping state drops the head; the next head of that dequeue is kept.
  EXPECT_EQ(c.on_dequeue(p, 100 * kMs, 20 * kMs, 100'000, false), Codel::Verdict::kDrop);
  EXPECT_EQ(c.on_dequeue(p, 100 * kMs, 20 * kMs, 100'000, false), Codel::Verdict::kKeep);
  // A dequeue that is late by more than one step drops every head whose time has passed.
  EXPECT_EQ(c.drop_next(), 200 * kMs);
  const uint64_t late = 300 * kMs;  // past 200 and 200 + 100/sqrt(2) = 270.7 ms
  EXPECT_EQ(c.on_dequeue(p, late, 20 * kMs, 100'000, false), Codel::Verdict::kDrop);
  EXPECT_EQ(c.on_dequeue(p, late, 20 * kMs, 100'000, false), Codel::Verdict::kDrop);
  EXPECT_EQ(c.on_dequeue(p, late, 20 * kMs, 100'000, false), Codel::Verdict::kKeep);
  EXPECT_EQ(c.count(), 3u);
}

TEST(Codel, ASojournBelowTargetEndsTheDroppingStateAndReentryResumesTheRate) {
  const CodelParams p = params();
  Codel c;
  const std::vector<uint64_t> drops = drop_times(c, p, kMs, 600 * kMs, 20 * kMs);
  ASSERT_GE(drops.size(), 5u);
  const uint32_t count = c.count();
  // Below target: keep, and leave the dropping state.
  EXPECT_EQ(c.on_dequeue(p, 601 * kMs, 1 * kMs, 100'000, false), Codel::Verdict::kKeep);
  EXPECT_FALSE(c.dropping());
  // Above target again soon after: a new interval must pass first (first_above was reset),
  // then the dropping state restarts from count - lastcount, not from one.
  EXPECT_EQ(c.on_dequeue(p, 602 * kMs, 20 * kMs, 100'000, false), Codel::Verdict::kKeep);
  EXPECT_EQ(c.on_dequeue(p, 701 * kMs, 20 * kMs, 100'000, false), Codel::Verdict::kKeep);
  EXPECT_EQ(c.on_dequeue(p, 702 * kMs, 20 * kMs, 100'000, false), Codel::Verdict::kDrop);
  EXPECT_EQ(c.count(), count - 1);  // lastcount was 1: delta = count - 1
  EXPECT_EQ(c.drop_next(),
            702 * kMs + static_cast<uint64_t>(100.0 * kMs / std::sqrt(double(count - 1))));
}

TEST(Codel, ALongPauseRestartsTheRateFromOne) {
  const CodelParams p = params();
  Codel c;
  drop_times(c, p, kMs, 600 * kMs, 20 * kMs);
  ASSERT_GT(c.count(), 2u);
  c.on_empty();
  EXPECT_FALSE(c.dropping());
  // 16 intervals after the last scheduled drop: count starts again at one.
  const uint64_t t = c.drop_next() + 16 * 100 * kMs;
  EXPECT_EQ(c.on_dequeue(p, t, 20 * kMs, 100'000, false), Codel::Verdict::kKeep);
  EXPECT_EQ(c.on_dequeue(p, t + 100 * kMs, 20 * kMs, 100'000, false), Codel::Verdict::kDrop);
  EXPECT_EQ(c.count(), 1u);
}

TEST(Codel, AQueueOfOneFrameIsNeverJudged) {
  const CodelParams p = params();
  Codel c;
  for (uint64_t t = 0; t <= 1000 * kMs; t += kMs)
    EXPECT_EQ(c.on_dequeue(p, t, 50 * kMs, 1514, false), Codel::Verdict::kKeep) << t;
  EXPECT_FALSE(c.dropping());
}

TEST(Codel, EcnCapableHeadsAreMarkedOnTheSameScheduleAndNeverDropped) {
  const CodelParams p = params(true);
  Codel marks, drops;
  const CodelParams plain = params(false);
  std::vector<uint64_t> mark_times, drop_times_seen;
  for (uint64_t t = 0; t <= 1000 * kMs; t += kMs) {
    const Codel::Verdict v = marks.on_dequeue(p, t, 20 * kMs, 100'000, true);
    EXPECT_NE(v, Codel::Verdict::kDrop);
    if (v == Codel::Verdict::kMark) mark_times.push_back(t);
    // The same schedule for a non-ECN queue, where each drop is followed by a kept head.
    if (drops.on_dequeue(plain, t, 20 * kMs, 100'000, false) == Codel::Verdict::kDrop) {
      drop_times_seen.push_back(t);
      EXPECT_EQ(drops.on_dequeue(plain, t, 20 * kMs, 100'000, false), Codel::Verdict::kKeep);
    }
  }
  ASSERT_GE(mark_times.size(), 5u);
  EXPECT_EQ(mark_times, drop_times_seen);
  // Not ECN capable, in a class with ecn: dropped as usual.
  EXPECT_EQ(marks.on_dequeue(p, marks.drop_next(), 20 * kMs, 100'000, false),
            Codel::Verdict::kDrop);
}

}  // namespace
}  // namespace dripgate::dataplane
