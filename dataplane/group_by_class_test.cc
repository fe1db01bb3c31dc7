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
// counted, and partitioned group by group, each in arrival order. What lies past n is ignored.
TEST(ClassGroups, NumbersCountsAndStarts) {
  ClassGroups<32> g;
  uint32_t seq[32] = {5, 5, 1, UINT32_MAX, 5, 70, 1, 70, 5};
  for (unsigned i = 9; i < 32; ++i) seq[i] = i % 2 ? 5 : 9;
  g.assign(seq, 9);
  ASSERT_EQ(g.n(), 9u);
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
  const std::vector<unsigned> ids{0, 0, 1, 2, 0, 3, 1, 3, 0};
  for (unsigned i = 0; i < 9; ++i) EXPECT_EQ(g.group(i), ids[i]);
  std::vector<unsigned> order;
  g.partition([&](unsigned grp, unsigned i) {
    EXPECT_EQ(g.group(i), grp);
    order.push_back(i);
  });
  EXPECT_EQ(order, (std::vector<unsigned>{0, 1, 4, 8, 2, 6, 3, 5, 7}));
}

// One class (the common burst): one group of every packet.
TEST(ClassGroups, OneClassCountsEveryPacket) {
  uint32_t seven[32], three[32];
  std::fill(seven, seven + 32, 7u);
  std::fill(three, three + 32, 3u);
  ClassGroups<32> g;
  g.assign(seven, 32);
  ASSERT_EQ(g.size(), 1u);
  EXPECT_EQ(g.count(0), 32u);
  EXPECT_EQ(g.members(0), 0xFFFFFFFFu);
  g.assign(three, 5);
  ASSERT_EQ(g.size(), 1u);
  EXPECT_EQ(g.members(0), 0b11111u);
  g.assign(three, 0);
  EXPECT_EQ(g.size(), 0u);
  EXPECT_EQ(g.n(), 0u);
}

// one_group(c, n) leaves what assign() leaves for n packets of class c.
TEST(ClassGroups, OneGroupIsAssignOfOneClass) {
  for (uint32_t c : {0u, 5u, 70u, UINT32_MAX}) {
    for (unsigned n : {0u, 1u, 17u, 32u}) {
      uint32_t cls[32];
      std::fill(cls, cls + 32, c);
      ClassGroups<32> one, all;
      all.assign(cls, n);
      one.assign(cls, 3);
      one.one_group(c, n);
      ASSERT_EQ(one.size(), all.size());
      EXPECT_EQ(one.n(), n);
      if (n == 0) continue;
      EXPECT_EQ(one.cls(0), c);
      EXPECT_EQ(one.members(0), all.members(0));
      EXPECT_EQ(one.count(0), n);
    }
  }
}

// Random classes, some kUnset: the groups are those of the classes with kUnset replaced by
// unset_as (kUnset itself: a group of its own), built here the slow way.
TEST(ClassGroups, AssignMatchesFirstAppearanceWithUnsetAs) {
  std::mt19937 rng(7);
  constexpr uint32_t kUnset = ClassGroups<32>::kUnset;
  for (int round = 0; round < 20000; ++round) {
    const unsigned n = rng() % 33;
    uint32_t c[32];
    for (auto& x : c) x = rng() % 4 == 0 ? 60 + rng() % 10 : rng() % 5;
    for (unsigned k = rng() % 4; k > 0; --k) c[rng() % 32] = kUnset;
    const uint32_t unset_as = rng() % 3 == 0 ? kUnset : rng() % 6;
    ClassGroups<32> g;
    g.assign(c, n, unset_as);
    std::vector<uint32_t> want_cls, want_mask;
    for (unsigned i = 0; i < n; ++i) {
      const uint32_t ci = c[i] == kUnset ? unset_as : c[i];
      const auto at = std::find(want_cls.begin(), want_cls.end(), ci);
      if (at == want_cls.end()) {
        want_cls.push_back(ci);
        want_mask.push_back(uint32_t{1} << i);
      } else {
        want_mask[at - want_cls.begin()] |= uint32_t{1} << i;
      }
    }
    ASSERT_EQ(g.size(), want_cls.size()) << "round " << round;
    ASSERT_EQ(g.n(), n);
    for (unsigned k = 0; k < g.size(); ++k) {
      EXPECT_EQ(g.cls(k), want_cls[k]) << "round " << round;
      EXPECT_EQ(g.members(k), want_mask[k]) << "round " << round;
    }
  }
}

}  // namespace
}  // namespace dripgate::dataplane
