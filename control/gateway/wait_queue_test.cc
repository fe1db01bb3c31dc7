#include "control/gateway/wait_queue.h"

#include <malloc.h>

#include <algorithm>
#include <cstdio>
#include <deque>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace dripgate::control {
namespace {

using Refusal = WaitQueue::Refusal;

constexpr WaitQueue::Options kRoomy{1'000'000, 1'000'000};

// The bytes glibc's malloc has handed out and not been given back (small blocks and mmapped).
size_t heap_in_use() {
  const struct mallinfo2 m = mallinfo2();
  return m.uordblks + m.hblkhd;
}

uint64_t push(WaitQueue& q, std::string_view gate, std::string_view tenant, uint8_t band = 0,
              int64_t deadline_ms = 1000, uint64_t cookie = 0) {
  const WaitQueue::Pushed p = q.push(gate, tenant, band, deadline_ms, 0, cookie);
  EXPECT_EQ(p.refusal, Refusal::kNone);
  return p.id;
}

// Why a push is refused (kNone: it was not).
Refusal refusal(WaitQueue& q, std::string_view gate, std::string_view tenant, uint8_t band = 0) {
  return q.push(gate, tenant, band, 1000, 0, 0).refusal;
}

// The ids gate serves, in order, until it is empty.
std::vector<uint64_t> drain(WaitQueue& q, std::string_view gate) {
  std::vector<uint64_t> ids;
  while (const WaitQueue::Waiter* w = q.next(gate)) {
    const uint64_t id = w->id;
    const std::optional<WaitQueue::Waiter> popped = q.pop(gate);
    EXPECT_TRUE(popped && popped->id == id);
    ids.push_back(id);
  }
  EXPECT_FALSE(q.pop(gate));
  return ids;
}

TEST(WaitQueueTest, PushReturnsTheWaiterAsGiven) {
  WaitQueue q(kRoomy);
  const WaitQueue::Pushed p = q.push("g", "a", 3, 900, 100, 77);
  ASSERT_EQ(p.refusal, Refusal::kNone);
  const WaitQueue::Waiter* w = q.next("g");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->id, p.id);
  EXPECT_EQ(w->cookie, 77u);
  EXPECT_EQ(w->band, 3);
  EXPECT_EQ(w->deadline_ms, 900);
  EXPECT_EQ(w->enqueued_ms, 100);
  EXPECT_EQ(q.next("other"), nullptr);
  EXPECT_EQ(q.size(), 1u);
  EXPECT_EQ(q.size("g"), 1u);
  EXPECT_EQ(q.band_size(3), 1u);
  EXPECT_EQ(q.tenant_size("a"), 1u);
}

TEST(WaitQueueTest, IdsAreNeverReused) {
  WaitQueue q(kRoomy);
  const uint64_t a = push(q, "g", "a");
  ASSERT_TRUE(q.pop("g"));
  const uint64_t b = push(q, "g", "a");
  EXPECT_NE(a, 0u);
  EXPECT_GT(b, a);
}

TEST(WaitQueueTest, BandsAreServedStrictlyInOrder) {
  WaitQueue q(kRoomy);
  const uint64_t b2 = push(q, "g", "a", 2);
  const uint64_t b0 = push(q, "g", "b", 0);
  const uint64_t b1 = push(q, "g", "a", 1);
  const uint64_t b0c = push(q, "g", "c", 0);
  const uint64_t b7 = push(q, "g", "b", WaitQueue::kBands - 1);
  EXPECT_EQ(q.band_size(0), 2u);
  EXPECT_EQ(drain(q, "g"), (std::vector<uint64_t>{b0, b0c, b1, b2, b7}));
}

TEST(WaitQueueTest, ABandOutOfRangeIsRefused) {
  WaitQueue q(kRoomy);
  const WaitQueue::Pushed p = q.push("g", "a", WaitQueue::kBands, 1000, 0, 0);
  EXPECT_EQ(p.id, 0u);
  EXPECT_EQ(p.refusal, Refusal::kBadBand);
  EXPECT_EQ(q.size(), 0u);
  EXPECT_EQ(q.band_size(WaitQueue::kBands), 0u);
}

TEST(WaitQueueTest, ATenantWithOneWaiterIsServedSecondBehindOneWithAThousand) {
  WaitQueue q(kRoomy);
  std::vector<uint64_t> a;
  for (int i = 0; i < 1000; ++i) a.push_back(push(q, "g", "a"));
  const uint64_t b = push(q, "g", "b");
  std::vector<uint64_t> want{a[0], b};
  want.insert(want.end(), a.begin() + 1, a.end());  // then a's, first in first out
  EXPECT_EQ(drain(q, "g"), want);
}

TEST(WaitQueueTest, TenantsTakeTurnsFirstInFirstOutEach) {
  WaitQueue q(kRoomy);
  const uint64_t a1 = push(q, "g", "a"), a2 = push(q, "g", "a");
  const uint64_t b1 = push(q, "g", "b");
  const uint64_t a3 = push(q, "g", "a");
  const uint64_t c1 = push(q, "g", "c"), c2 = push(q, "g", "c");
  const uint64_t b2 = push(q, "g", "b");
  EXPECT_EQ(drain(q, "g"), (std::vector<uint64_t>{a1, b1, c1, a2, b2, c2, a3}));
}

// A waiter served while a higher band's newcomer became next (its call was out when the newcomer
// came) passes its tenant's turn on as pop() would; a cancel does not.
TEST(WaitQueueTest, AWaiterServedByIdPassesItsTurnOn) {
  WaitQueue q(kRoomy);
  const uint64_t a1 = push(q, "g", "a", 1), a2 = push(q, "g", "a", 1);
  const uint64_t b1 = push(q, "g", "b", 1);
  ASSERT_EQ(q.next("g")->id, a1);
  const uint64_t hi = push(q, "g", "vip", 0);  // next() now
  EXPECT_TRUE(q.served(a1));
  EXPECT_FALSE(q.served(a1));
  EXPECT_EQ(drain(q, "g"), (std::vector<uint64_t>{hi, b1, a2}));
  // A cancel of a turn's first waiter leaves the turn where it is.
  const uint64_t c1 = push(q, "g", "c", 1), c2 = push(q, "g", "c", 1);
  const uint64_t d1 = push(q, "g", "d", 1);
  EXPECT_TRUE(q.cancel(c1));
  EXPECT_EQ(drain(q, "g"), (std::vector<uint64_t>{c2, d1}));
}

// A waiter that expires while its gate serves it passes its tenant's turn on; one that expires
// otherwise does not.
TEST(WaitQueueTest, AWaiterExpiringWhileServedPassesItsTurnOn) {
  WaitQueue q(kRoomy);
  const uint64_t a1 = push(q, "g", "a", 0, 10), a2 = push(q, "g", "a", 0, 1000);
  const uint64_t b1 = push(q, "g", "b", 0, 1000);
  q.serving(a1, true);
  std::vector<WaitQueue::Waiter> out;
  q.expired(10, out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_TRUE(out[0].serving);
  EXPECT_EQ(drain(q, "g"), (std::vector<uint64_t>{b1, a2}));
  const uint64_t c1 = push(q, "g", "c", 0, 10), c2 = push(q, "g", "c", 0, 1000);
  const uint64_t d1 = push(q, "g", "d", 0, 1000);
  q.serving(c1, true);
  q.serving(c1, false);  // refused: it stays first, no longer served
  out.clear();
  q.expired(10, out);
  EXPECT_EQ(drain(q, "g"), (std::vector<uint64_t>{c2, d1}));
}

TEST(WaitQueueTest, ANewcomerJoinsTheRotationAtItsEnd) {
  WaitQueue q(kRoomy);
  const uint64_t a1 = push(q, "g", "a"), a2 = push(q, "g", "a"), a3 = push(q, "g", "a");
  const uint64_t b1 = push(q, "g", "b"), b2 = push(q, "g", "b");
  EXPECT_EQ(q.pop("g")->id, a1);  // b's turn next, then a's
  const uint64_t c1 = push(q, "g", "c");
  EXPECT_EQ(drain(q, "g"), (std::vector<uint64_t>{b1, a2, c1, b2, a3}));
}

TEST(WaitQueueTest, ATenantThatLeavesRejoinsAtTheEnd) {
  WaitQueue q(kRoomy);
  const uint64_t a1 = push(q, "g", "a"), b1 = push(q, "g", "b"), c1 = push(q, "g", "c");
  const uint64_t d1 = push(q, "g", "d"), a2 = push(q, "g", "a"), c2 = push(q, "g", "c");
  const uint64_t d2 = push(q, "g", "d"), a3 = push(q, "g", "a");
  ASSERT_TRUE(q.cancel(b1));  // b leaves the rotation a, b, c, d
  EXPECT_EQ(q.pop("g")->id, a1);
  EXPECT_EQ(q.pop("g")->id, c1);
  // Back between a and c, where it was, b would be served before c2; it is served after it.
  const uint64_t b2 = push(q, "g", "b");
  EXPECT_EQ(drain(q, "g"), (std::vector<uint64_t>{d1, a2, c2, b2, d2, a3}));
}

TEST(WaitQueueTest, GatesAndBandsKeepTheirOwnRotations) {
  WaitQueue q(kRoomy);
  const uint64_t a1 = push(q, "g", "a"), a2 = push(q, "g", "a");
  const uint64_t h1 = push(q, "h", "a");
  const uint64_t b1 = push(q, "g", "b");
  const uint64_t a0 = push(q, "g", "a", 1);
  EXPECT_EQ(q.size("g"), 4u);
  EXPECT_EQ(q.tenant_size("a"), 4u);
  EXPECT_EQ(q.gates(), 2u);
  EXPECT_EQ(q.tenants(), 2u);
  EXPECT_EQ(drain(q, "h"), (std::vector<uint64_t>{h1}));
  EXPECT_EQ(drain(q, "g"), (std::vector<uint64_t>{a1, b1, a2, a0}));
  EXPECT_EQ(q.gates(), 0u);
  EXPECT_EQ(q.tenants(), 0u);
}

TEST(WaitQueueTest, CancelTakesAWaiterFromAnywhereInItsTenantsLine) {
  WaitQueue q(kRoomy);
  std::vector<uint64_t> a;
  for (int i = 0; i < 5; ++i) a.push_back(push(q, "g", "a"));
  EXPECT_TRUE(q.cancel(a[2]));  // the middle
  EXPECT_TRUE(q.cancel(a[0]));  // the front
  EXPECT_TRUE(q.cancel(a[4]));  // the back
  EXPECT_EQ(q.size(), 2u);
  EXPECT_EQ(q.tenant_size("a"), 2u);
  EXPECT_EQ(q.next("g")->id, a[1]);
  EXPECT_EQ(drain(q, "g"), (std::vector<uint64_t>{a[1], a[3]}));
}

TEST(WaitQueueTest, CancelOfATenantsLastWaiterTakesItOutOfTheRotation) {
  WaitQueue q(kRoomy);
  const uint64_t a1 = push(q, "g", "a"), a2 = push(q, "g", "a");
  const uint64_t b1 = push(q, "g", "b");
  const uint64_t c1 = push(q, "g", "c"), c2 = push(q, "g", "c");
  const uint64_t d1 = push(q, "g", "d");
  EXPECT_TRUE(q.cancel(a1));  // a keeps its turn with its next waiter
  EXPECT_EQ(q.next("g")->id, a2);
  EXPECT_TRUE(q.cancel(a2));  // the tenant whose turn it is leaves: the turn passes on
  EXPECT_EQ(q.next("g")->id, b1);
  EXPECT_TRUE(q.cancel(d1));  // the end of the rotation
  EXPECT_TRUE(q.cancel(c1));  // the middle
  EXPECT_EQ(drain(q, "g"), (std::vector<uint64_t>{b1, c2}));
  EXPECT_EQ(q.tenants(), 0u);
}

TEST(WaitQueueTest, CancelOfAnUnknownOrGoneWaiterIsFalse) {
  WaitQueue q(kRoomy);
  const uint64_t a = push(q, "g", "a");
  const uint64_t b = push(q, "g", "a", 0, 5);
  const uint64_t c = push(q, "g", "a");
  EXPECT_FALSE(q.cancel(0));
  EXPECT_FALSE(q.cancel(c + 1));
  ASSERT_TRUE(q.pop("g"));
  EXPECT_FALSE(q.cancel(a));  // popped
  std::vector<WaitQueue::Waiter> out;
  q.expired(5, out);
  EXPECT_FALSE(q.cancel(b));  // expired
  EXPECT_TRUE(q.cancel(c));
  EXPECT_FALSE(q.cancel(c));  // cancelled
  EXPECT_EQ(q.size(), 0u);
}

TEST(WaitQueueTest, ExpiryTakesWhatIsPastItsDeadlineInDeadlineOrderOnEveryGate) {
  WaitQueue q(kRoomy);
  const uint64_t g30 = push(q, "g", "a", 0, 30);
  const uint64_t h10 = push(q, "h", "b", 1, 10);
  const uint64_t g50 = push(q, "g", "b", 0, 50);
  const uint64_t h20 = push(q, "h", "a", 0, 20);
  const uint64_t g20 = push(q, "g", "c", 2, 20);
  EXPECT_EQ(q.earliest_deadline(), 10);

  std::vector<WaitQueue::Waiter> out;
  q.expired(9, out);
  EXPECT_TRUE(out.empty());
  q.expired(30, out);
  std::vector<uint64_t> ids;
  for (const WaitQueue::Waiter& w : out) ids.push_back(w.id);
  EXPECT_EQ(ids, (std::vector<uint64_t>{h10, h20, g20, g30}));  // equal deadlines: push order
  EXPECT_EQ(out[0].band, 1);
  EXPECT_EQ(q.next("h"), nullptr);
  EXPECT_EQ(q.next("g")->id, g50);
  EXPECT_EQ(q.size(), 1u);
  EXPECT_EQ(q.band_size(2), 0u);
  EXPECT_EQ(q.tenant_size("a"), 0u);
  EXPECT_EQ(q.earliest_deadline(), 50);
  EXPECT_TRUE(q.cancel(g50));
  EXPECT_EQ(q.earliest_deadline(), std::nullopt);
}

TEST(WaitQueueTest, CancelAndPopTakeTheirWaiterOutOfTheDeadlineOrder) {
  WaitQueue q(kRoomy);
  const uint64_t a = push(q, "g", "a", 0, 10);
  const uint64_t b = push(q, "g", "b", 0, 20);
  const uint64_t c = push(q, "g", "c", 0, 30);
  EXPECT_TRUE(q.cancel(b));
  EXPECT_EQ(q.pop("g")->id, a);
  EXPECT_EQ(q.earliest_deadline(), 30);
  std::vector<WaitQueue::Waiter> out;
  q.expired(100, out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].id, c);
}

TEST(WaitQueueTest, TheQueueBoundRefusesUntilAWaiterLeaves) {
  WaitQueue q({3, 100});
  const uint64_t a = push(q, "g", "a");
  push(q, "g", "b");
  push(q, "h", "c");
  WaitQueue::Pushed p = q.push("h", "d", 0, 1000, 0, 0);
  EXPECT_EQ(p.id, 0u);
  EXPECT_EQ(p.refusal, Refusal::kQueueFull);
  EXPECT_EQ(q.tenants(), 3u);  // a refusal leaves no trace
  EXPECT_EQ(q.gates(), 2u);
  ASSERT_TRUE(q.cancel(a));
  push(q, "h", "d");
  EXPECT_EQ(refusal(q, "h", "d"), Refusal::kQueueFull);
  ASSERT_TRUE(q.pop("g"));
  push(q, "g", "d");
}

TEST(WaitQueueTest, TheTenantBoundRefusesTheTenantOnly) {
  WaitQueue q({100, 2});
  const uint64_t a = push(q, "g", "a");
  push(q, "h", "a", 3);
  EXPECT_EQ(refusal(q, "g", "a"), Refusal::kTenantFull);
  EXPECT_EQ(refusal(q, "k", "a", 1), Refusal::kTenantFull);
  EXPECT_EQ(q.gates(), 2u);
  push(q, "g", "b");
  ASSERT_TRUE(q.cancel(a));
  push(q, "g", "a");
  EXPECT_EQ(refusal(q, "g", "a"), Refusal::kTenantFull);
  ASSERT_TRUE(q.pop("h"));
  push(q, "k", "a");
}

TEST(WaitQueueTest, LoweredBoundsKeepTheWaitersAndRefuseNewOnes) {
  WaitQueue q(kRoomy);
  for (int i = 0; i < 4; ++i) push(q, "g", "a");
  push(q, "g", "b");
  q.set_options({100, 2});
  EXPECT_EQ(q.size(), 5u);
  EXPECT_EQ(refusal(q, "g", "a"), Refusal::kTenantFull);
  push(q, "g", "b");
  q.set_options({3, 100});
  EXPECT_EQ(refusal(q, "g", "c"), Refusal::kQueueFull);
  EXPECT_EQ(drain(q, "g").size(), 6u);
  q.set_options({100, 0});
  EXPECT_EQ(refusal(q, "g", "c"), Refusal::kTenantFull);
}

TEST(WaitQueueTest, NextAndPeeksAllocateNothing) {
  WaitQueue q(kRoomy);
  for (int i = 0; i < 100; ++i) push(q, "dg:{g:model:a-long-model-name}:tb", std::to_string(i % 7));
  const std::string gate = "dg:{g:model:a-long-model-name}:tb";
  const size_t before = heap_in_use();
  uint64_t seen = 0;
  for (int i = 0; i < 1000; ++i) {
    seen += q.next(gate)->id + q.size(gate) + q.tenant_size("3") + q.band_size(0);
    seen += q.next("nowhere") == nullptr;
  }
  EXPECT_EQ(heap_in_use(), before);
  EXPECT_GT(seen, 0u);
}

// The memory of 100,000 waiters as glibc's malloc counts it, per waiter.
size_t measured_bytes_per_waiter(int tenants, int gates) {
  constexpr int kWaiters = 100'000;
  std::vector<std::string> tenant_names, gate_names;
  for (int i = 0; i < tenants; ++i) tenant_names.push_back("tenant-" + std::to_string(i));
  for (int i = 0; i < gates; ++i)
    gate_names.push_back("dg:{t:tenant-" + std::to_string(i) + "}:tb:tenant");
  WaitQueue q({kWaiters, kWaiters});
  const size_t before = heap_in_use();
  for (int i = 0; i < kWaiters; ++i)
    push(q, gate_names[i % gates], tenant_names[i / (kWaiters / tenants)],
         static_cast<uint8_t>(i % 3), 1000 + i % 997);
  const size_t bytes = (heap_in_use() - before) / kWaiters;
  std::printf("%d tenants, %d gates: %zu B per waiter\n", tenants, gates, bytes);
  return bytes;
}

TEST(WaitQueueTest, AWaiterTakesAtMostItsCountedBytes) {
  static_assert(WaitQueue::kBytesPerWaiter <= 512);
  const size_t shared = measured_bytes_per_waiter(1000, 4);
  EXPECT_LE(shared, 512u);
  EXPECT_LE(shared, WaitQueue::kBytesPerWaiter);
  // Each waiter alone in its tenant and its gate: its records and names are its own.
  EXPECT_LE(measured_bytes_per_waiter(100'000, 100'000), 512u);
}

TEST(WaitQueueTest, ChurnLeavesNothingBehind) {
  constexpr int kTenants = 10'000;
  std::vector<std::string> tenants;
  for (int i = 0; i < kTenants; ++i) tenants.push_back("tenant-" + std::to_string(i));
  const std::string gates[] = {"dg:{g:model:m1}:tb", "dg:{g:model:m2}:tb", "dg:{g:total}:tb"};
  WaitQueue q(kRoomy);
  std::vector<WaitQueue::Waiter> out;
  out.reserve(8192);  // more than can expire at once: its growth is not the queue's
  const size_t before = heap_in_use();
  // 1,000,000 waiters through, up to 5,000 at once, a third of them cancelled, some expired.
  int64_t now = 0;
  for (int i = 0; i < 1'000'000; ++i) {
    const std::string& gate = gates[i % 3];
    const uint64_t id = push(q, gate, tenants[static_cast<int64_t>(i) * 7919 % kTenants],
                             static_cast<uint8_t>(i % 4), now + 100 + i % 50);
    if (i % 3 == 0) q.cancel(id);
    if (q.size() > 5000) {
      for (const std::string& g : gates) q.pop(g);
      out.clear();
      q.expired(++now, out);
    }
  }
  for (const std::string& g : gates) drain(q, g);
  EXPECT_EQ(q.size(), 0u);
  EXPECT_EQ(q.tenants(), 0u);
  EXPECT_EQ(q.gates(), 0u);
  for (uint8_t b = 0; b < WaitQueue::kBands; ++b) EXPECT_EQ(q.band_size(b), 0u);
  EXPECT_EQ(q.earliest_deadline(), std::nullopt);
  EXPECT_LT(static_cast<int64_t>(heap_in_use() - before), 64 * 1024);
}

// A naive queue with the same order, for the randomized test: each waiter in a map by id, each
// gate and band's rotation as a deque of tenants whose front has the turn.
class Model {
 public:
  struct W {
    std::string gate, tenant;
    uint8_t band;
    int64_t deadline_ms;
  };
  std::map<uint64_t, W> waiters;
  std::map<std::pair<std::string, uint8_t>, std::deque<std::string>> rotations;

  void push(uint64_t id, const W& w) {
    if (count(w.gate, w.tenant, w.band) == 0) rotations[{w.gate, w.band}].push_back(w.tenant);
    waiters.emplace(id, w);
  }
  std::optional<uint64_t> next(const std::string& gate) const {
    for (uint8_t b = 0; b < WaitQueue::kBands; ++b) {
      auto r = rotations.find({gate, b});
      if (r == rotations.end() || r->second.empty()) continue;
      for (const auto& [id, w] : waiters)  // the oldest of the tenant whose turn it is
        if (w.gate == gate && w.band == b && w.tenant == r->second.front()) return id;
    }
    return std::nullopt;
  }
  std::optional<uint64_t> pop(const std::string& gate) {
    std::optional<uint64_t> id = next(gate);
    if (!id) return id;
    const W w = waiters.at(*id);
    std::deque<std::string>& r = rotations[{w.gate, w.band}];
    r.pop_front();
    waiters.erase(*id);
    if (count(w.gate, w.tenant, w.band) > 0) r.push_back(w.tenant);
    return id;
  }
  bool cancel(uint64_t id) {
    auto it = waiters.find(id);
    if (it == waiters.end()) return false;
    const W w = it->second;
    waiters.erase(it);
    if (count(w.gate, w.tenant, w.band) == 0) {
      std::deque<std::string>& r = rotations[{w.gate, w.band}];
      r.erase(std::find(r.begin(), r.end(), w.tenant));
    }
    return true;
  }
  std::vector<uint64_t> expired(int64_t now_ms) {
    std::vector<std::pair<int64_t, uint64_t>> due;
    for (const auto& [id, w] : waiters)
      if (w.deadline_ms <= now_ms) due.emplace_back(w.deadline_ms, id);
    std::sort(due.begin(), due.end());
    std::vector<uint64_t> ids;
    for (const auto& [deadline, id] : due) {
      cancel(id);
      ids.push_back(id);
    }
    return ids;
  }
  size_t count(const std::string& gate, const std::string& tenant, uint8_t band) const {
    return std::count_if(waiters.begin(), waiters.end(), [&](const auto& kv) {
      return kv.second.gate == gate && kv.second.tenant == tenant && kv.second.band == band;
    });
  }
  size_t tenant_count(const std::string& tenant) const {
    return std::count_if(waiters.begin(), waiters.end(),
                         [&](const auto& kv) { return kv.second.tenant == tenant; });
  }
};

TEST(WaitQueueTest, RandomOperationsMatchANaiveModel) {
  constexpr WaitQueue::Options kBounds{60, 15};
  const std::vector<std::string> gates{"g0", "g1", "g2"};
  std::vector<std::string> tenants;
  for (int i = 0; i < 8; ++i) tenants.push_back("t" + std::to_string(i));
  WaitQueue q(kBounds);
  Model m;
  std::mt19937_64 rng(20261207);
  auto pick = [&](size_t n) { return static_cast<size_t>(rng() % n); };
  int64_t now = 0;
  uint64_t last_id = 0;
  std::map<Refusal, int> pushes;  // so that the test shows it met every case
  size_t popped = 0, cancelled = 0, expired = 0;
  // Phases of 2,000 operations that fill the queue (to its bounds) and drain it in turn.
  enum Op { kPush, kPop, kCancel, kTime };
  constexpr Op kFilling[10] = {kPush, kPush, kPush, kPush,   kPush,
                               kPush, kPush, kPop,  kCancel, kTime};
  constexpr Op kDraining[10] = {kPush, kPush, kPush,   kPop,    kPop,
                                kPop,  kPop,  kCancel, kCancel, kTime};
  for (int op = 0; op < 100'000; ++op) {
    const std::string& gate = gates[pick(gates.size())];
    switch ((op / 2000 % 2 ? kDraining : kFilling)[pick(10)]) {
      case kPush: {
        // One tenant pushes as much as the others together, so that it meets its bound.
        const std::string& tenant = tenants[pick(2) ? 0 : pick(tenants.size())];
        const auto band = static_cast<uint8_t>(pick(3) * 3);
        const int64_t deadline = now + static_cast<int64_t>(pick(400));
        const WaitQueue::Pushed p = q.push(gate, tenant, band, deadline, now, op);
        Refusal want = Refusal::kNone;
        if (m.waiters.size() >= kBounds.max_waiters)
          want = Refusal::kQueueFull;
        else if (m.tenant_count(tenant) >= kBounds.max_waiters_per_tenant)
          want = Refusal::kTenantFull;
        ASSERT_EQ(p.refusal, want) << "op " << op;
        ++pushes[want];
        if (p.id) {
          ASSERT_GT(p.id, last_id);
          last_id = p.id;
          m.push(p.id, {gate, tenant, band, deadline});
        }
        break;
      }
      case kPop: {
        const std::optional<WaitQueue::Waiter> got = q.pop(gate);
        const std::optional<uint64_t> want = m.pop(gate);
        ASSERT_EQ(got.has_value(), want.has_value()) << "op " << op;
        popped += got.has_value();
        if (got) {
          ASSERT_EQ(got->id, *want) << "op " << op;
        }
        break;
      }
      case kCancel: {  // of one of the last ids given, waiting or gone, or of one not given
        const uint64_t id = last_id + 1 - std::min<uint64_t>(last_id, rng() % 64);
        const bool was = m.cancel(id);
        ASSERT_EQ(q.cancel(id), was) << "op " << op;
        cancelled += was;
        break;
      }
      case kTime: {
        now += static_cast<int64_t>(pick(40));
        std::vector<WaitQueue::Waiter> out;
        q.expired(now, out);
        std::vector<uint64_t> got;
        for (const WaitQueue::Waiter& w : out) got.push_back(w.id);
        ASSERT_EQ(got, m.expired(now)) << "op " << op;
        expired += got.size();
      }
    }
    ASSERT_EQ(q.size(), m.waiters.size());
    for (const std::string& g : gates) {
      const WaitQueue::Waiter* w = q.next(g);
      const std::optional<uint64_t> want = m.next(g);
      ASSERT_EQ(w != nullptr, want.has_value()) << "op " << op;
      if (w) {
        ASSERT_EQ(w->id, *want) << "op " << op;
      }
    }
    std::optional<int64_t> earliest;
    for (const auto& [id, w] : m.waiters)
      earliest = std::min(earliest.value_or(w.deadline_ms), w.deadline_ms);
    ASSERT_EQ(q.earliest_deadline(), earliest) << "op " << op;
  }
  for (const std::string& t : tenants) EXPECT_EQ(q.tenant_size(t), m.tenant_count(t));
  EXPECT_GT(pushes[Refusal::kNone], 10'000);
  EXPECT_GT(pushes[Refusal::kQueueFull], 100);
  EXPECT_GT(pushes[Refusal::kTenantFull], 100);
  EXPECT_GT(popped, 10'000u);
  EXPECT_GT(cancelled, 1000u);
  EXPECT_GT(expired, 1000u);
  std::printf("pushes %d (full: %d, tenant full: %d), pops %zu, cancels %zu, expired %zu\n",
              pushes[Refusal::kNone], pushes[Refusal::kQueueFull], pushes[Refusal::kTenantFull],
              popped, cancelled, expired);
}

}  // namespace
// What the other workers learn of this queue's next turn on a gate: the best band among its
// waiters but the one being served.
TEST(WaitQueueTest, BandAfterIsTheBestBandOfTheOtherWaiters) {
  WaitQueue q(kRoomy);
  EXPECT_EQ(q.band_after("g", 1), -1);
  const uint64_t a = push(q, "g", "t1", 1);
  EXPECT_EQ(q.band_after("g", a), -1);  // a alone
  const uint64_t b = push(q, "g", "t1", 1);
  EXPECT_EQ(q.band_after("g", a), 1);  // its tenant's next
  q.cancel(b);
  const uint64_t c = push(q, "g", "t2", 1);
  EXPECT_EQ(q.band_after("g", a), 1);  // another tenant in its band
  q.cancel(c);
  const uint64_t d = push(q, "g", "t3", 3);
  EXPECT_EQ(q.band_after("g", a), 3);
  const uint64_t e = push(q, "g", "t4", 0);
  EXPECT_EQ(q.band_after("g", a), 0);
  EXPECT_EQ(q.band_after("g", e), 1);
  const uint64_t f = push(q, "g", "t4", 1);
  EXPECT_EQ(q.band_tenants("g", 1), 2u);  // t1 and t4, however many waiters each
  EXPECT_EQ(q.band_tenants("g", 0), 1u);
  EXPECT_EQ(q.band_tenants("nowhere", 0), 0u);
  push(q, "other", "t1", 2);  // another gate's waiters do not count
  q.cancel(a);
  q.cancel(d);
  q.cancel(f);
  EXPECT_EQ(q.band_tenants("g", 1), 0u);
  EXPECT_EQ(q.band_after("g", e), -1);
}

TEST(WaitQueueTest, LastDeadlineIsTheLatestOfTheGatesWaitersUntilItEmpties) {
  WaitQueue q(kRoomy);
  EXPECT_EQ(q.last_deadline("g"), 0);
  const uint64_t a = push(q, "g", "t1", 1, 900);
  const uint64_t b = push(q, "g", "t2", 1, 700);  // earlier than a's: a's stays the last
  EXPECT_EQ(q.last_deadline("g"), 900);
  push(q, "other", "t1", 1, 5000);  // another gate's waiters do not count
  EXPECT_EQ(q.last_deadline("g"), 900);
  q.cancel(b);
  EXPECT_EQ(q.last_deadline("g"), 900);
  q.cancel(a);  // the gate's last waiter: the next one starts afresh
  EXPECT_EQ(q.last_deadline("g"), 0);
  push(q, "g", "t1", 1, 400);
  EXPECT_EQ(q.last_deadline("g"), 400);
}

}  // namespace dripgate::control
