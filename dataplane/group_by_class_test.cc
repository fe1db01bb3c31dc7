#include "dataplane/group_by_class.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

namespace dripgate::dataplane {
namespace {

void* pkt(uintptr_t id) {
  return reinterpret_cast<void*>(id);
}

TEST(GroupByClass, OneClassIsLeftInPlace) {
  std::vector<EnqueueReq> in;
  for (uintptr_t i = 1; i <= 5; ++i) in.push_back({pkt(i), 0, 3, 64});
  EnqueueReq tmp[32];
  EXPECT_EQ(group_by_class<32>(in.data(), 5, tmp), in.data());
  EXPECT_EQ(group_by_class<32>(in.data(), 0, tmp), in.data());
}

// Random bursts of up to 32 packets over up to 33 small class values, 60..69 (either side of
// the direct table's end) and the pass-through marker
// UINT32_MAX: a permutation, each class contiguous, classes in order of first
// appearance, and each class's packets in arrival order.
TEST(GroupByClass, StablePartitionInOrderOfFirstAppearance) {
  std::mt19937 rng(5);
  for (int round = 0; round < 20000; ++round) {
    const unsigned n = 1 + rng() % 32;
    const unsigned classes = 1 + rng() % 33;
    std::vector<EnqueueReq> in(n);
    for (unsigned i = 0; i < n; ++i) {
      uint32_t c = rng() % 4 == 0 ? 60 + rng() % 10 : rng() % classes;
      if (c == 32) c = UINT32_MAX;
      in[i] = EnqueueReq{pkt(i + 1), i, c, 64 + i};
    }
    EnqueueReq tmp[32];
    const EnqueueReq* out = group_by_class<32>(in.data(), n, tmp);
    std::vector<uint32_t> first_seen;
    for (const EnqueueReq& r : in)
      if (std::find(first_seen.begin(), first_seen.end(), r.cls) == first_seen.end())
        first_seen.push_back(r.cls);
    std::vector<EnqueueReq> want;
    for (uint32_t c : first_seen)
      for (const EnqueueReq& r : in)
        if (r.cls == c) want.push_back(r);
    for (unsigned i = 0; i < n; ++i) {
      ASSERT_EQ(out[i].pkt, want[i].pkt) << "round " << round << " position " << i;
      ASSERT_EQ(out[i].cls, want[i].cls);
      ASSERT_EQ(out[i].enq_tsc, want[i].enq_tsc);
      ASSERT_EQ(out[i].frame_len, want[i].frame_len);
    }
  }
}

// The groups as the classifying lcore builds them: numbered in order of first appearance,
// counted, and partitioned group by group, each in arrival order.
TEST(ClassGroups, NumbersCountsAndStarts) {
  ClassGroups<32> g;
  const uint32_t seq[] = {5, 5, 1, UINT32_MAX, 5, 70, 1, 70, 5};
  std::vector<unsigned> ids;
  for (uint32_t c : seq) ids.push_back(g.add(c));
  EXPECT_EQ(ids, (std::vector<unsigned>{0, 0, 1, 2, 0, 3, 1, 3, 0}));
  ASSERT_EQ(g.n(), 9u);
  for (unsigned i = 0; i < 9; ++i) EXPECT_EQ(g.group(i), ids[i]);
  g.tally();
  ASSERT_EQ(g.size(), 4u);
  EXPECT_EQ(g.cls(0), 5u);
  EXPECT_EQ(g.cls(1), 1u);
  EXPECT_EQ(g.cls(2), UINT32_MAX);
  EXPECT_EQ(g.cls(3), 70u);
  EXPECT_EQ(g.count(0), 4u);
  EXPECT_EQ(g.count(1), 2u);
  EXPECT_EQ(g.count(2), 1u);
  EXPECT_EQ(g.count(3), 2u);
  EXPECT_EQ(g.members(0), 0b100010011u);
  EXPECT_EQ(g.members(3), 0b010100000u);
  std::vector<unsigned> order;
  g.partition([&](unsigned grp, unsigned i) {
    EXPECT_EQ(g.group(i), grp);
    order.push_back(i);
  });
  EXPECT_EQ(order, (std::vector<unsigned>{0, 1, 4, 8, 2, 6, 3, 5, 7}));
}

// One class (the common burst) is counted without looking at the packets' groups.
TEST(ClassGroups, OneClassCountsEveryPacket) {
  ClassGroups<32> g;
  for (int i = 0; i < 32; ++i) EXPECT_EQ(g.add(7), 0u);
  g.tally();
  ASSERT_EQ(g.size(), 1u);
  EXPECT_EQ(g.count(0), 32u);
  EXPECT_EQ(g.members(0), 0xFFFFFFFFu);
  ClassGroups<32> few;
  for (int i = 0; i < 5; ++i) few.add(3);
  few.tally();
  EXPECT_EQ(few.members(0), 0b11111u);
  ClassGroups<32> empty;
  empty.tally();
  EXPECT_EQ(empty.size(), 0u);
}

// one_group(c, n) leaves what reset(), n add(c) and tally() leave, and the object is reusable
// for a burst grouped packet by packet afterwards.
TEST(ClassGroups, OneGroupIsAddPerPacket) {
  for (uint32_t c : {0u, 5u, 70u, UINT32_MAX}) {
    for (unsigned n : {1u, 17u, 32u}) {
      ClassGroups<32> one, each;
      for (unsigned i = 0; i < n; ++i) each.add(c);
      each.tally();
      one.add(9);
      one.one_group(c, n);
      ASSERT_EQ(one.size(), 1u);
      EXPECT_EQ(one.n(), n);
      EXPECT_EQ(one.cls(0), c);
      EXPECT_EQ(one.members(0), each.members(0));
      EXPECT_EQ(one.count(0), n);
      for (unsigned i = 0; i < n; ++i) EXPECT_EQ(one.group(i), 0u);
      one.reset();
      one.add(3);
      one.add(c);
      one.tally();
      EXPECT_EQ(one.size(), c == 3 ? 1u : 2u);
      EXPECT_EQ(one.count(0), c == 3 ? 2u : 1u);
    }
  }
}

// add_all() numbers and counts as add() per packet, also after packets added one by one.
TEST(ClassGroups, AddAllIsAddPerPacket) {
  std::mt19937 rng(7);
  for (int round = 0; round < 5000; ++round) {
    const unsigned n = 1 + rng() % 32;
    const unsigned before = rng() % (n + 1);
    std::vector<uint32_t> c(n);
    for (auto& x : c) x = rng() % 4 == 0 ? 60 + rng() % 10 : rng() % 5;
    if (rng() % 8 == 0) c[rng() % n] = UINT32_MAX;
    ClassGroups<32> each, all;
    for (unsigned i = 0; i < n; ++i) each.add(c[i]);
    for (unsigned i = 0; i < before; ++i) all.add(c[i]);
    all.add_all(n - before, [&](unsigned i) { return c[before + i]; });
    each.tally();
    all.tally();
    ASSERT_EQ(all.size(), each.size());
    ASSERT_EQ(all.n(), n);
    for (unsigned g = 0; g < each.size(); ++g) {
      EXPECT_EQ(all.cls(g), each.cls(g));
      EXPECT_EQ(all.members(g), each.members(g));
    }
  }
}

}  // namespace
}  // namespace dripgate::dataplane
