// The sub-queues of a fair class on their own: DRR shares by bytes, bounds, order within a
// source, and many sources in bounded memory.
#include "dataplane/fair_queue.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <random>
#include <vector>

namespace dripgate::dataplane {
namespace {

constexpr uint32_t kQuantum = 1536;

Item item(uint64_t id, uint32_t len, uint16_t tenant = 0) {
  return Item{reinterpret_cast<void*>(static_cast<uintptr_t>(id)), len, tenant, 0, id};
}
uint64_t id_of(const Item& it) {
  return reinterpret_cast<uintptr_t>(it.pkt);
}

TEST(FairQueue, BackloggedSourcesShareBytesWithinOnePercentWhateverTheirFrameSizes) {
  // Four sources with about 13 MB queued each, in frames of different sizes: 64 B, 1514 B,
  // random 64..1514 B, and 9000 B jumbo frames.
  const int counts[] = {200000, 9000, 17000, 1500};
  FairQueue q(227500, 64, 0, kQuantum);
  std::mt19937 rng(7);
  std::uniform_int_distribution<uint32_t> mixed(64, 1514);
  uint64_t id = 0;
  for (int i = 0; i < 200000; ++i) {
    const uint32_t len[] = {64, 1514, mixed(rng), 9000};
    for (uint32_t s = 0; s < 4; ++s) {
      if (i < counts[s]) {
        ASSERT_EQ(q.push(item(++id, len[s]), s + 1), FairQueue::Push::kOk);
      }
    }
  }
  // While all four stay backlogged (over 40 MB sent, a few thousand rounds), each gets a
  // quarter.
  std::map<uint32_t, uint64_t> bytes;
  uint64_t total = 0;
  while (total < 40'000'000) {
    const uint32_t s = q.front_subqueue();
    const Item it = q.pop();
    bytes[s] += it.frame_len;
    total += it.frame_len;
  }
  for (uint32_t s = 1; s <= 4; ++s) {
    EXPECT_NEAR(static_cast<double>(bytes[s]) / static_cast<double>(total), 0.25, 0.0025)
        << "source " << s;
  }
}

TEST(FairQueue, ANewSourceIsServedWithinOneRoundNotBehindABurst) {
  FairQueue q(1024, 16, 0, kQuantum);
  for (uint64_t i = 1; i <= 500; ++i) ASSERT_EQ(q.push(item(i, 1000), 1), FairQueue::Push::kOk);
  EXPECT_EQ(id_of(q.pop()), 1u);  // source 1 has the turn
  ASSERT_EQ(q.push(item(1000, 1000), 2), FairQueue::Push::kOk);
  // Source 1 finishes its quantum (1536 B: one more 1000 B frame), then source 2's frame.
  EXPECT_EQ(id_of(q.pop()), 2u);
  EXPECT_EQ(id_of(q.pop()), 1000u);
  EXPECT_EQ(q.active(), 1u);
}

TEST(FairQueue, EachSourceKeepsItsOrder) {
  FairQueue q(3000, 8, 0, kQuantum);
  std::mt19937 rng(3);
  std::map<uint32_t, std::vector<uint64_t>> pushed, popped;
  for (uint64_t i = 1; i <= 3000; ++i) {
    const uint32_t key = rng() % 8;
    ASSERT_EQ(q.push(item(i, 64 + rng() % 1450), key), FairQueue::Push::kOk);
    pushed[key].push_back(i);
  }
  while (!q.empty()) {
    const uint32_t s = q.front_subqueue();
    popped[s].push_back(id_of(q.pop()));
  }
  EXPECT_EQ(pushed, popped);
}

TEST(FairQueue, TheClassDepthBoundsAllAndTheSubqueueDepthEach) {
  FairQueue q(10, 4, 3, kQuantum);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(q.push(item(i, 100), 1), FairQueue::Push::kOk);
  EXPECT_EQ(q.push(item(9, 100), 1), FairQueue::Push::kSubqueueFull);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(q.push(item(i, 100), 2), FairQueue::Push::kOk);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(q.push(item(i, 100), 3), FairQueue::Push::kOk);
  EXPECT_EQ(q.push(item(9, 100), 4), FairQueue::Push::kOk);
  EXPECT_EQ(q.size(), 10u);
  EXPECT_EQ(q.push(item(9, 100), 4), FairQueue::Push::kFull);
  q.pop();
  EXPECT_EQ(q.push(item(9, 100), 4), FairQueue::Push::kOk);
}

TEST(FairQueue, TenThousandTenantsEachGetATurnBeforeAnyGetsASecond) {
  const uint32_t tenants = 10000;
  FairQueue q(2 * tenants, 16384, 0, kQuantum);
  // Every tenant queues two 1000 B frames; the pool holds exactly the class's depth.
  for (uint32_t t = 1; t <= tenants; ++t) {
    ASSERT_EQ(q.push(item(t, 1000, static_cast<uint16_t>(t)), t), FairQueue::Push::kOk);
    ASSERT_EQ(q.push(item(tenants + t, 1000, static_cast<uint16_t>(t)), t), FairQueue::Push::kOk);
  }
  EXPECT_EQ(q.active(), tenants);
  EXPECT_EQ(q.pool_size(), 2 * tenants);
  // A quantum of 1536 B pays for one 1000 B frame and a second one: each tenant sends both
  // in its turn (DRR by bytes), tenants in the order they became backlogged.
  for (uint32_t t = 1; t <= tenants; ++t) {
    EXPECT_EQ(q.pop().tenant, t);
    EXPECT_EQ(q.pop().tenant, t);
  }
  EXPECT_TRUE(q.empty());
}

TEST(FairQueue, SmallFramesAlternateOnePerQuantumWithBigOnes) {
  FairQueue q(100, 4, 0, kQuantum);
  for (uint64_t i = 0; i < 10; ++i) {
    ASSERT_EQ(q.push(item(100 + i, 1500), 1), FairQueue::Push::kOk);
    ASSERT_EQ(q.push(item(200 + i, 500), 2), FairQueue::Push::kOk);
  }
  // Each source sends while its credit is positive (it may end a turn up to one frame in
  // debt, which the next quantum pays back): source 1 two 1500 B frames on its first 1536 B,
  // source 2 four 500 B frames, then source 1 one frame on its 72 B of credit, and so on.
  std::vector<uint64_t> order;
  while (order.size() < 8) order.push_back(id_of(q.pop()));
  EXPECT_EQ(order, (std::vector<uint64_t>{100, 101, 200, 201, 202, 203, 102, 204}));
}

TEST(FairQueue, TakeAllKeepsEverySourcesOrderAndLimits) {
  FairQueue small(6, 4, 0, kQuantum);
  for (uint64_t i = 1; i <= 6; ++i)
    ASSERT_EQ(small.push(item(i, 100), i % 2), FairQueue::Push::kOk);
  FairQueue big(100, 4, 0, kQuantum);
  big.take_all(small);
  EXPECT_TRUE(small.empty());
  EXPECT_EQ(big.size(), 6u);
  std::map<uint32_t, std::vector<uint64_t>> popped;
  while (!big.empty()) {
    const uint32_t s = big.front_subqueue();
    popped[s].push_back(id_of(big.pop()));
  }
  EXPECT_EQ(popped[0], (std::vector<uint64_t>{2, 4, 6}));
  EXPECT_EQ(popped[1], (std::vector<uint64_t>{1, 3, 5}));
}

}  // namespace
}  // namespace dripgate::dataplane
