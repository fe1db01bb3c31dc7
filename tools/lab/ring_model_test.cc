#include "tools/lab/ring_model.h"

#include <gtest/gtest.h>

namespace dripgate::lab {
namespace {

TEST(RingModel, ABurstLargerThanTheRingLosesTheRest) {
  RingModel ring(4, 1000);  // 4 descriptors, one drained per millisecond
  int kept = 0;
  for (int i = 0; i < 10; ++i) kept += ring.arrive(1'000'000'000 + i) ? 1 : 0;  // 10 in 10 ns
  EXPECT_EQ(kept, 4);
  EXPECT_NEAR(ring.max_fill(), 4.0, 1e-3);  // less the few ns of drain between them
}

TEST(RingModel, ArrivalsAtTheDrainRateNeverFillIt) {
  RingModel ring(2, 1000);
  for (uint64_t i = 0; i < 1000; ++i) EXPECT_TRUE(ring.arrive(i * 1'000'000));
  EXPECT_LE(ring.max_fill(), 1.0 + 1e-9);
}

TEST(RingModel, DrainFreesDescriptorsInProportionToTheGap) {
  RingModel ring(3, 1000);
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(ring.arrive(0));
  EXPECT_FALSE(ring.arrive(500'000));   // half a descriptor drained: still full
  EXPECT_TRUE(ring.arrive(1'000'000));  // one whole descriptor drained
  EXPECT_FALSE(ring.arrive(1'000'000));
}

TEST(ArrivalFigures, PacedStreamHasBurstFactorOneAndNoJitter) {
  std::vector<uint64_t> t;
  for (uint64_t i = 0; i < 2000; ++i) t.push_back(i * 500'000);  // 2000/s
  ArrivalFigures f = arrival_figures(t, 2000);
  EXPECT_EQ(f.iat_p50_ns, 500'000u);
  EXPECT_EQ(f.iat_p99_ns, 500'000u);
  EXPECT_EQ(f.jitter_p99_ns, 0u);
  EXPECT_EQ(f.peak_100us, 1u);
  EXPECT_EQ(f.peak_1ms, 2u);
  EXPECT_EQ(f.peak_10ms, 20u);
  EXPECT_DOUBLE_EQ(f.burst_factor, 1.0);
}

TEST(ArrivalFigures, BurstShowsInEveryWindow) {
  std::vector<uint64_t> t;
  for (uint64_t i = 0; i < 200; ++i) t.push_back(i * 10'000);  // 200 in 2 ms
  ArrivalFigures f = arrival_figures(t, 2000);
  EXPECT_EQ(f.peak_100us, 10u);
  EXPECT_EQ(f.peak_1ms, 100u);
  EXPECT_EQ(f.peak_10ms, 200u);
  EXPECT_DOUBLE_EQ(f.burst_factor, 10.0);  // 200 where 20 would be the rate
  EXPECT_EQ(f.iat_p50_ns, 10'000u);
}

}  // namespace
}  // namespace dripgate::lab
