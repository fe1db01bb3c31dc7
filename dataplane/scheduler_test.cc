// The drip scheduler with an injected clock: tsc_hz = 1e9, so one tick is one ns and every
// interval below is exact arithmetic unless a test says otherwise.
#include "dataplane/scheduler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <map>
#include <random>
#include <set>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

#include "dataplane/latency_hist.h"
#include "dataplane/scheduler_test_util.h"

namespace dripgate::dataplane {
namespace {

using namespace scheduler_test;

TEST(Scheduler, PpsDeparturesAreExact) {
  Scheduler s(make_drip(1e6), {make_class("a")}, kHz);  // 1000 ticks per packet
  for (uint64_t i = 1; i <= 10; ++i) ASSERT_TRUE(s.enqueue(0, pkt(i), 100, 0));
  Poller p{s};
  auto d = p.at(0);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].scheduled_tsc, 0u);
  EXPECT_EQ(id_of(d[0].pkt), 1u);
  EXPECT_EQ(s.next_departure(), 1000u);
  EXPECT_TRUE(p.at(999).empty());
  for (uint64_t k = 1; k < 10; ++k) {
    d = p.at(k * 1000);
    ASSERT_EQ(d.size(), 1u) << k;
    EXPECT_EQ(d[0].scheduled_tsc, k * 1000);
    EXPECT_EQ(id_of(d[0].pkt), k + 1);
    EXPECT_EQ(d[0].cls, 0u);
    EXPECT_EQ(d[0].frame_len, 100u);
  }
  EXPECT_EQ(s.next_departure(), kNever);
  EXPECT_EQ(s.port_stats().stall_clamps, 0u);
}

TEST(Scheduler, BpsCountsFramePlusWireOverhead) {
  // 1 Gbit/s at 1 GHz: 8 ticks per wire byte, wire bytes = frame + 24 (preamble, SFD, IFG,
  // FCS).
  Scheduler s(make_drip(0, 1e9), {make_class("a")}, kHz);
  const std::vector<uint32_t> sizes = {64, 1500, 200, 9000, 60, 1514};
  for (size_t i = 0; i < sizes.size(); ++i) ASSERT_TRUE(s.enqueue(0, pkt(i + 1), sizes[i], 0));
  Poller p{s};
  p.until(kNever - 1);
  ASSERT_EQ(p.sent.size(), sizes.size());
  uint64_t t = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    EXPECT_EQ(p.sent[i].scheduled_tsc, t) << i;
    t += (sizes[i] + 24) * 8;
  }
}

TEST(Scheduler, BpsNonIntegerTicksPerByteIsExactOverMixedSizes) {
  // 3 Gbit/s at 1 GHz: 8/3 tick per byte; departure k at floor(8/3 * wire bytes before it).
  Scheduler s(make_drip(0, 3e9), {make_class("a", 1, 0, 0, 4096)}, kHz);
  std::mt19937 rng(7);
  std::uniform_int_distribution<uint32_t> size(60, 9000);
  std::vector<uint32_t> sizes(4000);
  for (auto& v : sizes) v = size(rng);
  for (size_t i = 0; i < sizes.size(); ++i) ASSERT_TRUE(s.enqueue(0, pkt(i + 1), sizes[i], 0));
  Poller p{s};
  p.until(kNever - 1);
  ASSERT_EQ(p.sent.size(), sizes.size());
  uint64_t bytes = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    ASSERT_EQ(p.sent[i].scheduled_tsc, bytes * 8 / 3) << i;
    bytes += sizes[i] + 24;
  }
}

TEST(Scheduler, BothRatesSetTakesTheLargerInterval) {
  // 1e6 pps = 1000 ticks; 1 Gbit/s = 8 ticks per wire byte: 64 B -> 704, 1500 B -> 12192.
  Scheduler s(make_drip(1e6, 1e9), {make_class("a")}, kHz);
  const std::vector<uint32_t> sizes = {64, 1500, 64, 64, 200};
  for (size_t i = 0; i < sizes.size(); ++i) ASSERT_TRUE(s.enqueue(0, pkt(i + 1), sizes[i], 0));
  Poller p{s};
  p.until(kNever - 1);
  ASSERT_EQ(p.sent.size(), 5u);
  const std::vector<uint64_t> want = {0, 1000, 13192, 14192, 15192};
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(p.sent[i].scheduled_tsc, want[i]) << i;
  EXPECT_EQ(s.next_departure(), kNever);
}

TEST(Scheduler, LongRunRateIsExactWithFractionalInterval) {
  // 3e8 pps at 1 GHz: 3 1/3 ticks per packet. Departure k must be at floor(10 k / 3) for a
  // million departures: no drift in either direction.
  Scheduler s(make_drip(3e8), {make_class("a", 1, 0, 0, 1024)}, kHz);
  uint64_t next_id = 1;
  uint64_t now = 0;
  constexpr uint64_t kN = 1'000'000;
  Departure out[4];
  for (uint64_t k = 0; k < kN; ++k) {
    while (s.backlog() < 512) ASSERT_TRUE(s.enqueue(0, pkt(next_id++), 64, now));
    now = s.next_departure();
    ASSERT_EQ(now, k * 10 / 3) << k;
    unsigned n_exp = 0;
    ASSERT_EQ(s.poll(now, out, 4, nullptr, 0, &n_exp), 1u) << k;
    ASSERT_EQ(out[0].scheduled_tsc, k * 10 / 3) << k;
  }
  EXPECT_EQ(s.next_departure(), kN * 10 / 3);
  EXPECT_EQ(s.class_stats(0).tx_packets, kN);
}

TEST(Scheduler, CatchUpAfterStallIsBoundedByMaxCatchup) {
  Scheduler s(make_drip(1e6, 0, 1, 8), {make_class("a")}, kHz);
  for (uint64_t i = 1; i <= 100; ++i) ASSERT_TRUE(s.enqueue(0, pkt(i), 100, 0));
  Poller p{s};
  ASSERT_EQ(p.at(0).size(), 1u);
  // Stall: the caller comes back 50 intervals late. Exactly 8 late departures (42000 ..
  // 49000), one on time at 50000, then nothing more until 51000.
  auto d = p.at(50'000);
  ASSERT_EQ(d.size(), 9u);
  for (uint64_t i = 0; i < 9; ++i) EXPECT_EQ(d[i].scheduled_tsc, 42'000 + i * 1000) << i;
  EXPECT_EQ(std::count_if(d.begin(), d.end(),
                          [](const Departure& x) { return x.scheduled_tsc < 50'000; }),
            8);
  EXPECT_TRUE(p.at(50'000).empty());
  EXPECT_TRUE(p.at(50'999).empty());
  EXPECT_EQ(s.next_departure(), 51'000u);
  for (uint64_t k = 51; k < 60; ++k) {
    d = p.at(k * 1000);
    ASSERT_EQ(d.size(), 1u);
    EXPECT_EQ(d[0].scheduled_tsc, k * 1000);
  }
  EXPECT_EQ(s.port_stats().stall_clamps, 1u);
  // A stall shorter than max_catchup intervals is made up entirely, no clamp.
  d = p.at(64'000);  // due at 60000: 60000..64000 = 5 departures
  ASSERT_EQ(d.size(), 5u);
  EXPECT_EQ(d.front().scheduled_tsc, 60'000u);
  EXPECT_EQ(d.back().scheduled_tsc, 64'000u);
  EXPECT_EQ(s.port_stats().stall_clamps, 1u);
}

TEST(Scheduler, ZeroCatchupJumpsToNow) {
  Scheduler s(make_drip(1e6, 0, 1, 0), {make_class("a")}, kHz);
  for (uint64_t i = 1; i <= 10; ++i) ASSERT_TRUE(s.enqueue(0, pkt(i), 100, 0));
  Poller p{s};
  ASSERT_EQ(p.at(0).size(), 1u);
  auto d = p.at(7'500);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].scheduled_tsc, 7'500u);
  EXPECT_EQ(s.next_departure(), 8'500u);
}

TEST(Scheduler, IdleTimeGivesNoCatchUpCredit) {
  Scheduler s(make_drip(1e6, 0, 1, 8), {make_class("a")}, kHz);
  Poller p{s};
  ASSERT_TRUE(s.enqueue(0, pkt(1), 100, 0));
  ASSERT_EQ(p.at(0).size(), 1u);
  // Nothing queued for a long time, then a burst of 20 arrives at once.
  for (uint64_t i = 2; i <= 21; ++i) ASSERT_TRUE(s.enqueue(0, pkt(i), 100, 1'000'000));
  auto d = p.at(1'000'000);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].scheduled_tsc, 1'000'000u);
  p.until(kNever - 1);
  ASSERT_EQ(p.sent.size(), 21u);
  for (uint64_t k = 1; k < 21; ++k) {
    EXPECT_EQ(p.sent[k].scheduled_tsc, 1'000'000 + (k - 1) * 1000) << k;
  }
  EXPECT_EQ(s.port_stats().stall_clamps, 0u);
}

TEST(Scheduler, ArrivalWithinAnIntervalWaitsForTheSlot) {
  Scheduler s(make_drip(1e6), {make_class("a")}, kHz);
  Poller p{s};
  ASSERT_TRUE(s.enqueue(0, pkt(1), 100, 0));
  ASSERT_EQ(p.at(0).size(), 1u);
  ASSERT_TRUE(s.enqueue(0, pkt(2), 100, 500));
  EXPECT_TRUE(p.at(500).empty());
  EXPECT_EQ(s.next_departure(), 1000u);
  auto d = p.at(1000);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].scheduled_tsc, 1000u);
}

TEST(Scheduler, LatePollAfterLateArrivalCountsOnlyFromArrival) {
  // Packet arrives at 100000 after idle; the caller polls 3 intervals later: that packet is
  // late by 3000 (a real stall), but the ones behind it are spaced from it, and nothing is
  // credited for the idle time before the arrival.
  Scheduler s(make_drip(1e6, 0, 1, 8), {make_class("a")}, kHz);
  Poller p{s};
  for (uint64_t i = 1; i <= 10; ++i) ASSERT_TRUE(s.enqueue(0, pkt(i), 100, 100'000));
  auto d = p.at(103'000);
  ASSERT_EQ(d.size(), 4u);
  for (uint64_t i = 0; i < 4; ++i) EXPECT_EQ(d[i].scheduled_tsc, 100'000 + i * 1000);
}

TEST(Scheduler, WeightsShareBytesWithinOnePercent) {
  // Port-bound (1e6 pps), three backlogged classes with different frame sizes.
  std::vector<config::Class> classes = {make_class("a", 1), make_class("b", 2), make_class("c", 5)};
  Scheduler s(make_drip(1e6), classes, kHz);
  const uint32_t size[3] = {64, 1500, 700};
  std::mt19937 rng(1);
  std::uniform_int_distribution<uint32_t> jitter(0, 600);
  uint64_t id = 1;
  Poller p{s};
  for (uint64_t now = 0; now < 300'000'000; now += 1000) {
    for (unsigned c = 0; c < 3; ++c) {
      while (s.class_stats(c).queue_len < 64) {
        const uint32_t len = c == 2 ? 300 + jitter(rng) : size[c];
        ASSERT_TRUE(s.enqueue(c, pkt(id++), len, now));
      }
    }
    ASSERT_EQ(p.at(now).size(), 1u);
  }
  double total = 0;
  for (unsigned c = 0; c < 3; ++c) total += s.class_stats(c).tx_bytes;
  const double weights[3] = {1, 2, 5};
  for (unsigned c = 0; c < 3; ++c) {
    const double share = s.class_stats(c).tx_bytes / total;
    const double want = weights[c] / 8;
    EXPECT_NEAR(share / want, 1.0, 0.01) << "class " << c << " share " << share;
  }
}

TEST(Scheduler, WeightsWithJumboFramesLargerThanTheQuantum) {
  std::vector<config::Class> classes = {make_class("jumbo", 1), make_class("small", 3)};
  Scheduler s(make_drip(0, 1e10), classes, kHz);
  uint64_t id = 1;
  Poller p{s};
  uint64_t now = 0;
  for (int i = 0; i < 200'000; ++i) {
    while (s.class_stats(0).queue_len < 8) ASSERT_TRUE(s.enqueue(0, pkt(id++), 9000, now));
    while (s.class_stats(1).queue_len < 64) ASSERT_TRUE(s.enqueue(1, pkt(id++), 64, now));
    now = s.next_departure();
    ASSERT_EQ(p.at(now).size(), 1u);
  }
  const double a = s.class_stats(0).tx_bytes, b = s.class_stats(1).tx_bytes;
  EXPECT_NEAR(a / (a + b), 0.25, 0.0025);
}

// Textbook DRR (Shreedhar & Varghese), one full round at a time, for comparison.
std::vector<uint64_t> reference_drr(std::vector<std::vector<std::pair<uint64_t, uint32_t>>> q,
                                    const std::vector<uint64_t>& quantum) {
  std::vector<uint64_t> order;
  std::vector<uint64_t> deficit(q.size(), 0);
  std::vector<size_t> head(q.size(), 0);
  for (bool any = true; any;) {
    any = false;
    for (size_t c = 0; c < q.size(); ++c) {
      if (head[c] == q[c].size()) continue;
      any = true;
      deficit[c] += quantum[c];
      while (head[c] < q[c].size() && deficit[c] >= q[c][head[c]].second) {
        deficit[c] -= q[c][head[c]].second;
        order.push_back(q[c][head[c]++].first);
      }
      if (head[c] == q[c].size()) deficit[c] = 0;
    }
  }
  return order;
}

TEST(Scheduler, DrrOrderMatchesTextbookDrrIncludingJumboFrames) {
  std::vector<config::Class> classes = {make_class("a", 1, 0, 0, 4096),
                                        make_class("b", 2, 0, 0, 4096),
                                        make_class("c", 3, 0, 0, 4096)};
  Scheduler s(make_drip(0), classes, kHz);
  std::mt19937 rng(5);
  std::vector<std::vector<std::pair<uint64_t, uint32_t>>> q(3);
  uint64_t id = 1;
  for (unsigned c = 0; c < 3; ++c) {
    // Class a only jumbo frames (several rounds per frame), b and c mixed.
    for (int i = 0; i < 1000 + 300 * static_cast<int>(c); ++i) {
      const uint32_t len = c == 0 ? 8000 + rng() % 1200 : 60 + rng() % 9000;
      q[c].emplace_back(id, len);
      ASSERT_TRUE(s.enqueue(c, pkt(id++), len, 0));
    }
  }
  std::vector<uint64_t> got;
  Departure out[64];
  while (s.backlog() != 0) {
    const unsigned n = s.poll(0, out, 64, nullptr, 0, nullptr);
    ASSERT_GT(n, 0u);
    for (unsigned i = 0; i < n; ++i) got.push_back(id_of(out[i].pkt));
  }
  EXPECT_EQ(got, reference_drr(q, {kQuantumBytes, 2 * kQuantumBytes, 3 * kQuantumBytes}));
}

TEST(Scheduler, ClassCapBelowWeightShareGivesTheRestToOthers) {
  // Port 10 kpps; gold has weight 4 (would get 8 kpps) but a 2 kpps cap; bronze is uncapped.
  std::vector<config::Class> classes = {make_class("gold", 4, 2000), make_class("bronze", 1)};
  Scheduler s(make_drip(10'000), classes, kHz);
  uint64_t id = 1;
  Poller p{s};
  std::vector<uint64_t> gold_times;
  uint64_t now = 0;
  while (now < 1'000'000'000) {
    for (unsigned c = 0; c < 2; ++c) {
      while (s.class_stats(c).queue_len < 32) ASSERT_TRUE(s.enqueue(c, pkt(id++), 500, now));
    }
    now = s.next_departure();
    if (now >= 1'000'000'000) break;
    for (const Departure& d : p.at(now)) {
      if (d.cls == 0) gold_times.push_back(d.scheduled_tsc);
    }
  }
  const uint64_t gold = s.class_stats(0).tx_packets, bronze = s.class_stats(1).tx_packets;
  EXPECT_EQ(gold + bronze, 10'000u);  // the port is never left idle
  EXPECT_NEAR(static_cast<double>(gold), 2000.0, 2.0);
  EXPECT_NEAR(static_cast<double>(bronze), 8000.0, 2.0);
  // Over any window of 10 consecutive gold departures the cap holds, give or take the one
  // interval by which bronze's DRR turn can delay a gold departure.
  ASSERT_GT(gold_times.size(), 10u);
  for (size_t i = 10; i < gold_times.size(); ++i) {
    EXPECT_GE(gold_times[i] - gold_times[i - 10], 9 * 500'000u) << i;
  }
}

TEST(Scheduler, ClassCapAboveWeightShareDoesNotBind) {
  // Weights 1:1 on a 10 kpps port; a's cap (8 kpps) is above its 5 kpps share.
  std::vector<config::Class> classes = {make_class("a", 1, 8000), make_class("b", 1)};
  Scheduler s(make_drip(10'000), classes, kHz);
  uint64_t id = 1;
  Poller p{s};
  for (uint64_t now = 0; now < 1'000'000'000; now += 100'000) {
    for (unsigned c = 0; c < 2; ++c) {
      while (s.class_stats(c).queue_len < 32) ASSERT_TRUE(s.enqueue(c, pkt(id++), 1000, now));
    }
    p.at(now);
  }
  EXPECT_NEAR(static_cast<double>(s.class_stats(0).tx_packets), 5000.0, 2.0);
  EXPECT_NEAR(static_cast<double>(s.class_stats(1).tx_packets), 5000.0, 2.0);
}

TEST(Scheduler, TimeHeldByACapIsNotSavedAsDrrCredit) {
  // a is capped to 1 kpps for a second while b takes the rest of the 10 kpps port; when a's cap
  // is lifted, a and b share 1:1 at once: a does not cash in a second of unused turns.
  std::vector<config::Class> classes = {make_class("a", 1, 1000), make_class("b", 1)};
  Scheduler s(make_drip(10'000), classes, kHz);
  uint64_t id = 1;
  Poller p{s};
  auto refill = [&](uint64_t now) {
    for (unsigned c = 0; c < 2; ++c) {
      while (s.class_stats(c).queue_len < 32) ASSERT_TRUE(s.enqueue(c, pkt(id++), 500, now));
    }
  };
  uint64_t now = 0;
  for (; now < 1'000'000'000; now += 100'000) {
    refill(now);
    ASSERT_EQ(p.at(now).size(), 1u);
  }
  EXPECT_NEAR(static_cast<double>(s.class_stats(0).tx_packets), 1000.0, 2.0);
  ASSERT_TRUE(s.set_class_rate(0, 0, 0, now));
  const size_t mark = p.sent.size();
  for (int i = 0; i < 100; ++i, now += 100'000) {
    refill(now);
    ASSERT_EQ(p.at(now).size(), 1u);
  }
  const auto a = std::count_if(p.sent.begin() + static_cast<std::ptrdiff_t>(mark), p.sent.end(),
                               [](const Departure& d) { return d.cls == 0; });
  EXPECT_GE(a, 45);
  EXPECT_LE(a, 55);
}

TEST(Scheduler, CappedClassAloneDoesNotBuildPortCredit) {
  // Port 10 kpps, the only backlogged class is capped at 1 kpps: its departures are on the
  // class timeline (scheduled = class slot, never "late"), and when an uncapped class wakes up
  // the port has no stored catch-up burst.
  std::vector<config::Class> classes = {make_class("capped", 1, 1000), make_class("other", 1)};
  Scheduler s(make_drip(10'000, 0, 1, 8), classes, kHz);
  Poller p{s};
  for (uint64_t i = 1; i <= 20; ++i) ASSERT_TRUE(s.enqueue(0, pkt(i), 100, 0));
  p.until(10'000'000);
  ASSERT_EQ(p.sent.size(), 11u);  // 0, 1 ms, ..., 10 ms
  for (size_t k = 0; k < p.sent.size(); ++k) EXPECT_EQ(p.sent[k].scheduled_tsc, k * 1'000'000);
  // The port timeline stands at 10.1 ms; the other class wakes up at 10.5 ms: one packet now,
  // then one per 100 us, not a burst of the four port slots that went unused.
  for (uint64_t i = 100; i < 110; ++i) ASSERT_TRUE(s.enqueue(1, pkt(i), 100, 10'500'000));
  auto d = p.at(10'500'000);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].cls, 1u);
  EXPECT_EQ(d[0].scheduled_tsc, 10'500'000u);
  EXPECT_EQ(s.next_departure(), 10'600'000u);
  EXPECT_EQ(s.port_stats().stall_clamps, 0u);
}

TEST(Scheduler, ClassCapCatchUpIsBoundedToo) {
  // Port unlimited, class capped at 1e6 pps with max_catchup 2: after a stall the class books
  // two late departures and one on time.
  Scheduler s(make_drip(0, 0, 1, 2), {make_class("a", 1, 1e6)}, kHz);
  Poller p{s};
  for (uint64_t i = 1; i <= 10; ++i) ASSERT_TRUE(s.enqueue(0, pkt(i), 100, 0));
  ASSERT_EQ(p.at(0).size(), 1u);
  auto d = p.at(20'000);
  ASSERT_EQ(d.size(), 3u);
  EXPECT_EQ(d[0].scheduled_tsc, 18'000u);
  EXPECT_EQ(d[1].scheduled_tsc, 19'000u);
  EXPECT_EQ(d[2].scheduled_tsc, 20'000u);
  EXPECT_EQ(s.next_departure(), 21'000u);
  EXPECT_EQ(s.class_stats(0).stall_clamps, 1u);
}

TEST(Scheduler, TtlExpiredPacketsAreCountedAndReturned) {
  // ttl 1 ms = 1e6 ticks; port 1 kpps = 1e6 ticks per packet.
  Scheduler s(make_drip(1000), {make_class("a", 1, 0, 0, 16, 1)}, kHz);
  for (uint64_t i = 1; i <= 5; ++i) ASSERT_TRUE(s.enqueue(0, pkt(i), 100, 0));
  Poller p{s};
  ASSERT_EQ(p.at(0).size(), 1u);
  auto d = p.at(1'000'000);  // age exactly the TTL: still sent
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(id_of(d[0].pkt), 2u);
  EXPECT_TRUE(p.expired.empty());
  d = p.at(2'000'000);  // age 2 ms: the remaining three expire, in FIFO order
  EXPECT_TRUE(d.empty());
  ASSERT_EQ(p.expired.size(), 3u);
  for (uint64_t i = 0; i < 3; ++i) EXPECT_EQ(id_of(p.expired[i].pkt), i + 3);
  const ClassStats st = s.class_stats(0);
  EXPECT_EQ(st.drop_ttl, 3u);
  EXPECT_EQ(st.tx_packets, 2u);
  EXPECT_EQ(st.queue_len, 0u);
  EXPECT_EQ(s.next_departure(), kNever);
}

TEST(Scheduler, TtlExpiryRespectsTheCallersArraySize) {
  Scheduler s(make_drip(1000), {make_class("a", 1, 0, 0, 16, 1), make_class("b")}, kHz);
  for (uint64_t i = 1; i <= 3; ++i) ASSERT_TRUE(s.enqueue(0, pkt(i), 100, 0));
  ASSERT_TRUE(s.enqueue(1, pkt(10), 100, 5'000'000));
  Poller p{s};
  // Class a's three packets are stale; only one fits per poll, so a waits and b goes.
  auto d = p.at(5'000'000, 8, 1);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(id_of(d[0].pkt), 10u);
  EXPECT_EQ(p.expired.size(), 1u);
  p.at(6'000'000, 8, 1);
  p.at(7'000'000, 8, 1);
  EXPECT_EQ(p.expired.size(), 3u);
  EXPECT_EQ(s.class_stats(0).drop_ttl, 3u);
  EXPECT_EQ(s.backlog(), 0u);
}

TEST(Scheduler, TtlZeroNeverExpires) {
  Scheduler s(make_drip(1), {make_class("a", 1, 0, 0, 16, 0)}, kHz);
  for (uint64_t i = 1; i <= 3; ++i) ASSERT_TRUE(s.enqueue(0, pkt(i), 100, 0));
  Poller p{s};
  p.until(kNever - 1);
  EXPECT_EQ(p.sent.size(), 3u);
  EXPECT_TRUE(p.expired.empty());
}

TEST(Scheduler, DepthLimitTailDrops) {
  Scheduler s(make_drip(1e6), {make_class("a", 1, 0, 0, 4)}, kHz);
  for (uint64_t i = 1; i <= 6; ++i) EXPECT_EQ(s.enqueue(0, pkt(i), 100, 0), i <= 4) << i;
  ClassStats st = s.class_stats(0);
  EXPECT_EQ(st.drop_depth, 2u);
  EXPECT_EQ(st.enq_packets, 4u);
  EXPECT_EQ(st.enq_bytes, 400u);
  EXPECT_EQ(st.queue_len, 4u);
  Poller p{s};
  p.until(kNever - 1);
  ASSERT_EQ(p.sent.size(), 4u);
  for (uint64_t i = 0; i < 4; ++i) EXPECT_EQ(id_of(p.sent[i].pkt), i + 1);  // the tail dropped
  // Room again after dequeue.
  EXPECT_TRUE(s.enqueue(0, pkt(7), 100, 10'000));
}

TEST(Scheduler, BadClassIndexIsRefusedAndCounted) {
  Scheduler s(make_drip(0), {make_class("a")}, kHz);
  EXPECT_FALSE(s.enqueue(1, pkt(1), 100, 0));
  EXPECT_FALSE(s.enqueue(99, pkt(2), 100, 0));
  EXPECT_EQ(s.port_stats().drop_bad_class, 2u);
  EXPECT_EQ(s.backlog(), 0u);
}

TEST(Scheduler, SetPortRateFasterMidStreamLosesNothingAndDoesNotBurst) {
  Scheduler s(make_drip(1000), {make_class("a")}, kHz);  // 1e6 ticks per packet
  for (uint64_t i = 1; i <= 10; ++i) ASSERT_TRUE(s.enqueue(0, pkt(i), 100, 0));
  Poller p{s};
  p.until(2'000'000);
  ASSERT_EQ(p.sent.size(), 3u);
  // At 2.5 ms go to 4 kpps (250000 ticks): the next departure is now (not 2.25 ms, which
  // would be a retroactive catch-up), then every 250000.
  ASSERT_TRUE(s.set_port_rate(4000, 0, 2'500'000));
  EXPECT_EQ(s.next_departure(), 2'500'000u);
  p.until(kNever - 1);
  ASSERT_EQ(p.sent.size(), 10u);
  for (uint64_t k = 3; k < 10; ++k) {
    EXPECT_EQ(p.sent[k].scheduled_tsc, 2'500'000 + (k - 3) * 250'000) << k;
    EXPECT_EQ(id_of(p.sent[k].pkt), k + 1);
  }
  EXPECT_EQ(s.port_rate().rate_pps, 4000);
}

TEST(Scheduler, SetPortRateSlowerMidStreamRebasesOnLastDeparture) {
  Scheduler s(make_drip(1000), {make_class("a")}, kHz);
  for (uint64_t i = 1; i <= 10; ++i) ASSERT_TRUE(s.enqueue(0, pkt(i), 100, 0));
  Poller p{s};
  p.until(2'000'000);
  ASSERT_TRUE(s.set_port_rate(500, 0, 2'500'000));  // 2e6 ticks: next = 2 ms + 2 ms
  EXPECT_EQ(s.next_departure(), 4'000'000u);
  p.until(kNever - 1);
  ASSERT_EQ(p.sent.size(), 10u);
  for (uint64_t k = 3; k < 10; ++k) EXPECT_EQ(p.sent[k].scheduled_tsc, 2'000'000 * (k - 1));
  // To unlimited and back: everything queued goes at once, then limited again.
  for (uint64_t i = 11; i <= 15; ++i) ASSERT_TRUE(s.enqueue(0, pkt(i), 100, 20'000'000));
  ASSERT_TRUE(s.set_port_rate(0, 0, 20'000'000));
  EXPECT_EQ(p.at(20'000'000).size(), 5u);
  EXPECT_EQ(s.class_stats(0).tx_packets, 15u);
}

TEST(Scheduler, SetClassRateAppliesAtOnce) {
  Scheduler s(make_drip(0), {make_class("a", 1, 1000)}, kHz);
  for (uint64_t i = 1; i <= 6; ++i) ASSERT_TRUE(s.enqueue(0, pkt(i), 100, 0));
  Poller p{s};
  ASSERT_EQ(p.at(0).size(), 1u);
  EXPECT_EQ(s.next_departure(), 1'000'000u);
  ASSERT_TRUE(s.set_class_rate(0, 1e6, 0, 10));  // 1000 ticks: due at 1000
  EXPECT_EQ(s.next_departure(), 1000u);
  p.until(kNever - 1);
  ASSERT_EQ(p.sent.size(), 6u);
  for (uint64_t k = 1; k < 6; ++k) EXPECT_EQ(p.sent[k].scheduled_tsc, k * 1000);
  EXPECT_EQ(s.class_rate(0).rate_pps, 1e6);
}

TEST(Scheduler, SetRateRejectsBadInputAndChangesNothing) {
  Scheduler s(make_drip(1000), {make_class("a")}, kHz);
  std::string why;
  EXPECT_FALSE(s.set_port_rate(-1, 0, 0, &why));
  EXPECT_NE(why.find("rate_pps"), std::string::npos) << why;
  EXPECT_FALSE(s.set_port_rate(0, std::numeric_limits<double>::infinity(), 0, &why));
  EXPECT_NE(why.find("rate_bps"), std::string::npos) << why;
  EXPECT_FALSE(s.set_port_rate(1e-9, 0, 0, &why));
  EXPECT_NE(why.find("too low"), std::string::npos) << why;
  EXPECT_FALSE(s.set_class_rate(3, 10, 0, 0, &why));
  EXPECT_NE(why.find("class"), std::string::npos) << why;
  EXPECT_FALSE(s.set_class_rate(0, std::nan(""), 0, 0, &why));
  EXPECT_EQ(s.port_rate().rate_pps, 1000);
  EXPECT_EQ(s.class_rate(0).rate_pps, 0);
}

// One maximum per unit, judged where every rate is judged: the YAML (validate) and set_rate
// refuse the same numbers with the same words, naming the field and the limit.
TEST(Scheduler, RatesAboveTheMaximumAreRefusedEverywhere) {
  Scheduler s(make_drip(1000), {make_class("a")}, kHz);
  std::string why;
  EXPECT_TRUE(s.set_port_rate(kMaxRatePps, kMaxRateBps, 0, &why)) << why;
  EXPECT_TRUE(s.set_class_rate(0, kMaxRatePps, kMaxRateBps, 0, &why)) << why;
  EXPECT_FALSE(s.set_port_rate(1e308, 0, 0, &why));
  EXPECT_EQ(why, "rate_pps: rate_pps too high (the maximum is 1e9 packets per second)");
  EXPECT_FALSE(s.set_class_rate(0, 0, 1.5e12, 0, &why));
  EXPECT_EQ(why, "rate_bps: rate_bps too high (the maximum is 1e12 bits per second)");
  EXPECT_EQ(s.port_rate().rate_pps, kMaxRatePps);
  EXPECT_EQ(s.class_rate(0).rate_bps, kMaxRateBps);

  const std::vector<std::string> errors =
      Scheduler::validate(make_drip(2e9), {make_class("a", 1, 0, 1e13)}, kHz);
  const std::vector<std::string> expected = {
      "drip.rate_pps: rate_pps too high (the maximum is 1e9 packets per second)",
      "classes.a.rate_bps: rate_bps too high (the maximum is 1e12 bits per second)"};
  EXPECT_EQ(errors, expected);
}

// A reload's scheduler part as the drip lcore gets it: prepared, then applied at `now`.
void reconfigure(Scheduler& s, const config::Drip& drip, const std::vector<config::Class>& classes,
                 uint64_t now) {
  SchedulerReconfig r;
  const std::vector<std::string> errors = s.prepare(drip, classes, &r);
  ASSERT_TRUE(errors.empty()) << errors.front();
  s.apply(r, now);
}

TEST(Scheduler, ReconfigRatesRebaseLikeSetRateAndKeepEveryQueuedPacket) {
  Scheduler s(make_drip(1000), {make_class("a"), make_class("b", 1, 1000)}, kHz);
  for (uint64_t i = 1; i <= 10; ++i) ASSERT_TRUE(s.enqueue(0, pkt(i), 100, 0));
  Poller p{s};
  p.until(2'000'000);
  ASSERT_EQ(p.sent.size(), 3u);
  // As SetPortRateFasterMidStream...: the next departure is now, then every 250000 ticks.
  reconfigure(s, make_drip(4000), {make_class("a"), make_class("b", 1, 7, 8000)}, 2'500'000);
  EXPECT_EQ(s.next_departure(), 2'500'000u);
  EXPECT_EQ(s.port_rate().rate_pps, 4000);
  EXPECT_EQ(s.class_rate(1).rate_pps, 7);
  EXPECT_EQ(s.class_rate(1).rate_bps, 8000);
  p.until(kNever - 1);
  ASSERT_EQ(p.sent.size(), 10u);
  for (uint64_t k = 3; k < 10; ++k) {
    EXPECT_EQ(p.sent[k].scheduled_tsc, 2'500'000 + (k - 3) * 250'000) << k;
    EXPECT_EQ(id_of(p.sent[k].pkt), k + 1);
  }
}

TEST(Scheduler, ReconfigClassCapAppliesAtOnce) {
  Scheduler s(make_drip(0), {make_class("a", 1, 1000)}, kHz);
  for (uint64_t i = 1; i <= 6; ++i) ASSERT_TRUE(s.enqueue(0, pkt(i), 100, 0));
  Poller p{s};
  ASSERT_EQ(p.at(0).size(), 1u);
  EXPECT_EQ(s.next_departure(), 1'000'000u);
  reconfigure(s, make_drip(0), {make_class("a", 1, 1e6)}, 10);  // 1000 ticks: due at 1000
  EXPECT_EQ(s.next_departure(), 1000u);
  p.until(kNever - 1);
  ASSERT_EQ(p.sent.size(), 6u);
  for (uint64_t k = 1; k < 6; ++k) EXPECT_EQ(p.sent[k].scheduled_tsc, k * 1000);
}

TEST(Scheduler, ReconfigWeightsShareFromTheNextTurn) {
  // Port-bound, frames of exactly one quantum: each turn sends `weight` frames.
  Scheduler s(make_drip(1e6), {make_class("a"), make_class("b")}, kHz);
  uint64_t id = 1, now = 0;
  Poller p{s};
  auto run = [&](int departures) {
    unsigned from_a = 0;
    for (int k = 0; k < departures; ++k, now += 1000) {
      for (unsigned c = 0; c < 2; ++c) {
        while (s.class_stats(c).queue_len < 8) EXPECT_TRUE(s.enqueue(c, pkt(id++), 1536, now));
      }
      const auto d = p.at(now);
      EXPECT_EQ(d.size(), 1u);
      from_a += !d.empty() && d[0].cls == 0;
    }
    return from_a;
  };
  EXPECT_EQ(run(400), 200u);
  reconfigure(s, make_drip(1e6), {make_class("a", 3), make_class("b")}, now);
  // 3:1 from the next turn: at most the turn in progress is off.
  const unsigned a = run(400);
  EXPECT_GE(a, 299u);
  EXPECT_LE(a, 301u);
  // Back down: a deficit saved at weight 3 is cut to the new quantum, no stored credit.
  reconfigure(s, make_drip(1e6), {make_class("a"), make_class("b")}, now);
  const unsigned again = run(400);
  EXPECT_GE(again, 199u);
  EXPECT_LE(again, 201u);
}

TEST(Scheduler, ReconfigLowerTtlExpiresQueuedPacketsAtTheNextDequeue) {
  Scheduler s(make_drip(1000), {make_class("a", 1, 0, 0, 16, 0)}, kHz);
  for (uint64_t i = 1; i <= 5; ++i) ASSERT_TRUE(s.enqueue(0, pkt(i), 100, 0));
  Poller p{s};
  ASSERT_EQ(p.at(0).size(), 1u);
  reconfigure(s, make_drip(1000), {make_class("a", 1, 0, 0, 16, 1)}, 500'000);  // ttl 1 ms
  // At 3 ms the four queued since 0 are 3 ms old: expired, counted, handed back in order.
  EXPECT_TRUE(p.at(3'000'000).empty());
  ASSERT_EQ(p.expired.size(), 4u);
  for (uint64_t i = 0; i < 4; ++i) EXPECT_EQ(id_of(p.expired[i].pkt), i + 2);
  const ClassStats st = s.class_stats(0);
  EXPECT_EQ(st.enq_packets, st.tx_packets + st.drop_ttl + st.queue_len);
  EXPECT_EQ(st.drop_ttl, 4u);
}

TEST(Scheduler, ReconfigShallowerQueueKeepsWhatIsQueuedAndRefusesNewArrivals) {
  Scheduler s(make_drip(1000), {make_class("a", 1, 0, 0, 16)}, kHz);
  for (uint64_t i = 1; i <= 10; ++i) ASSERT_TRUE(s.enqueue(0, pkt(i), 100, 0));
  reconfigure(s, make_drip(1000), {make_class("a", 1, 0, 0, 4)}, 0);
  EXPECT_EQ(s.class_stats(0).queue_len, 10u);    // nothing dropped by the change itself
  EXPECT_FALSE(s.enqueue(0, pkt(100), 100, 0));  // above the new depth: a depth drop
  EXPECT_EQ(s.class_stats(0).drop_depth, 1u);
  Poller p{s};
  p.until(6'000'000);  // seven sent, three left: below the depth again
  ASSERT_EQ(p.sent.size(), 7u);
  EXPECT_TRUE(s.enqueue(0, pkt(11), 100, 6'000'000));
  EXPECT_FALSE(s.enqueue(0, pkt(101), 100, 6'000'000));
  p.until(kNever - 1);
  ASSERT_EQ(p.sent.size(), 11u);
  for (uint64_t k = 0; k < 11; ++k) EXPECT_EQ(id_of(p.sent[k].pkt), k + 1);
  EXPECT_EQ(s.class_stats(0).drop_depth, 2u);
}

TEST(Scheduler, ReconfigDeeperQueueMovesToALargerRingInOrder) {
  Scheduler s(make_drip(1000), {make_class("a", 1, 0, 0, 3), make_class("b")}, kHz);
  for (uint64_t i = 1; i <= 3; ++i) ASSERT_TRUE(s.enqueue(0, pkt(i), 100, 0));
  EXPECT_FALSE(s.enqueue(0, pkt(99), 100, 0));
  // 3 -> 4 fits the ring (4 slots): no allocation, only the limit moves.
  SchedulerReconfig r;
  ASSERT_TRUE(
      s.prepare(make_drip(1000), {make_class("a", 1, 0, 0, 4), make_class("b")}, &r).empty());
  EXPECT_EQ(r.rings[0].ring_size(), 0u);
  s.apply(r, 0);
  ASSERT_TRUE(s.enqueue(0, pkt(4), 100, 0));
  // 4 -> 100: a 128-slot ring allocated by prepare(); apply() hands the old one back in r.
  SchedulerReconfig deeper;
  ASSERT_TRUE(s.prepare(make_drip(1000), {make_class("a", 1, 0, 0, 100), make_class("b")}, &deeper)
                  .empty());
  EXPECT_EQ(deeper.rings[0].ring_size(), 128u);
  EXPECT_EQ(deeper.rings[1].ring_size(), 0u);
  s.apply(deeper, 0);
  EXPECT_EQ(deeper.rings[0].ring_size(), 4u);
  for (uint64_t i = 5; i <= 100; ++i) ASSERT_TRUE(s.enqueue(0, pkt(i), 100, 0)) << i;
  EXPECT_FALSE(s.enqueue(0, pkt(101), 100, 0));
  Poller p{s};
  p.until(kNever - 1);
  ASSERT_EQ(p.sent.size(), 100u);
  for (uint64_t k = 0; k < 100; ++k) EXPECT_EQ(id_of(p.sent[k].pkt), k + 1);
  const ClassStats st = s.class_stats(0);
  EXPECT_EQ(st.drop_depth, 2u);
  EXPECT_EQ(st.enq_packets, st.tx_packets);
}

TEST(Scheduler, ReconfigBatchAndCatchupApply) {
  Scheduler s(make_drip(1000), {make_class("a")}, kHz);
  for (uint64_t i = 1; i <= 12; ++i) ASSERT_TRUE(s.enqueue(0, pkt(i), 100, 0));
  Poller p{s};
  EXPECT_EQ(p.at(0).size(), 1u);
  reconfigure(s, make_drip(1000, 0, 4, 0), {make_class("a")}, 0);
  EXPECT_EQ(p.at(1'000'000).size(), 4u);  // a slot now releases a batch of 4
  // max_catchup 0: after a stall the timeline jumps to now, one slot, no catch-up burst.
  EXPECT_EQ(p.at(50'000'000).size(), 4u);
  EXPECT_TRUE(p.at(50'000'000).empty());
}

TEST(Scheduler, PrepareRefusesOtherClassesAndBadValuesNamingTheField) {
  Scheduler s(make_drip(1000), {make_class("a"), make_class("b")}, kHz);
  SchedulerReconfig r;
  auto first = [](const std::vector<std::string>& e) -> std::string {
    return e.empty() ? "" : e.front();
  };
  for (const auto& classes :
       std::vector<std::vector<config::Class>>{{make_class("b"), make_class("a")},
                                               {make_class("a"), make_class("c")},
                                               {make_class("a"), make_class("b"), make_class("c")},
                                               {make_class("a")}}) {
    const std::string e = first(s.prepare(make_drip(1000), classes, &r));
    EXPECT_NE(e.find("classes: "), std::string::npos) << e;
  }
  EXPECT_EQ(first(s.prepare(make_drip(1000, 0, 0), {make_class("a"), make_class("b")}, &r)),
            "drip.batch: must be >= 1");
  const std::string e =
      first(s.prepare(make_drip(1000), {make_class("a", 0), make_class("b", 1, -1)}, &r));
  EXPECT_EQ(e, "classes.a.weight: must be >= 1");
  EXPECT_EQ(s.port_rate().rate_pps, 1000);
}

TEST(Scheduler, BatchReleasesUpToBatchPerSlot) {
  Scheduler s(make_drip(1e6, 0, 4), {make_class("a")}, kHz);
  for (uint64_t i = 1; i <= 10; ++i) ASSERT_TRUE(s.enqueue(0, pkt(i), 100, 0));
  Poller p{s};
  auto d = p.at(0);
  ASSERT_EQ(d.size(), 4u);
  for (const auto& x : d) EXPECT_EQ(x.scheduled_tsc, 0u);
  EXPECT_EQ(s.next_departure(), 4000u);  // the slot is batch x interval long
  EXPECT_TRUE(p.at(3999).empty());
  d = p.at(4000);
  ASSERT_EQ(d.size(), 4u);
  for (const auto& x : d) EXPECT_EQ(x.scheduled_tsc, 4000u);
  d = p.at(8000);
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(s.next_departure(), kNever);
  // A partial slot advanced the timeline by two intervals only.
  ASSERT_TRUE(s.enqueue(0, pkt(11), 100, 9000));
  EXPECT_EQ(s.next_departure(), 10'000u);
  // Order is kept.
  for (uint64_t i = 0; i < 10; ++i) EXPECT_EQ(id_of(p.sent[i].pkt), i + 1);
}

TEST(Scheduler, BatchKeepsTheLongRunRate) {
  Scheduler s(make_drip(3e8, 0, 32), {make_class("a", 1, 0, 0, 4096)}, kHz);
  uint64_t id = 1, now = 0, sent = 0;
  Departure out[64];
  while (sent < 320'000) {
    while (s.backlog() < 2048) ASSERT_TRUE(s.enqueue(0, pkt(id++), 64, now));
    now = s.next_departure();
    const unsigned n = s.poll(now, out, 64, nullptr, 0, nullptr);
    ASSERT_EQ(n, 32u);
    for (unsigned i = 0; i < n; ++i) ASSERT_EQ(out[i].scheduled_tsc, sent * 10 / 3);
    sent += n;
  }
  EXPECT_EQ(s.next_departure(), sent * 10 / 3);
}

TEST(Scheduler, UnlimitedPortReleasesEverythingUpToMax) {
  Scheduler s(make_drip(0), {make_class("a"), make_class("b")}, kHz);
  for (uint64_t i = 1; i <= 50; ++i) ASSERT_TRUE(s.enqueue(i % 2, pkt(i), 100, 0));
  EXPECT_EQ(s.next_departure(), 0u);
  Poller p{s};
  EXPECT_EQ(p.at(5, 32).size(), 32u);
  EXPECT_EQ(p.at(5, 32).size(), 18u);
  EXPECT_EQ(s.next_departure(), kNever);
}

TEST(Scheduler, PerClassOrderIsKept) {
  std::vector<config::Class> classes = {make_class("a", 3), make_class("b", 1),
                                        make_class("c", 2, 3000)};
  Scheduler s(make_drip(20'000), classes, kHz);
  std::mt19937 rng(3);
  uint64_t id = 1;
  std::map<unsigned, std::vector<uint64_t>> in, out;
  Poller p{s};
  for (uint64_t now = 0; now < 200'000'000; now += 37'000) {
    for (int k = 0; k < 3; ++k) {
      const unsigned c = rng() % 3;
      if (s.enqueue(c, pkt(id), 64 + rng() % 1400, now)) in[c].push_back(id);
      ++id;
    }
    p.at(now);
  }
  p.until(kNever - 1);
  for (const auto& d : p.sent) out[d.cls].push_back(id_of(d.pkt));
  EXPECT_EQ(in, out);
}

TEST(Scheduler, EveryPacketIsSentExpiredDroppedOrDrained) {
  std::vector<config::Class> classes = {make_class("a", 4, 5000, 0, 64, 2),
                                        make_class("b", 1, 0, 2e8, 32, 5),
                                        make_class("c", 2, 0, 0, 16, 0)};
  Scheduler s(make_drip(20'000, 1e9, 2, 4), classes, kHz);
  std::mt19937 rng(11);
  std::set<uint64_t> outstanding;
  uint64_t offered[3] = {0, 0, 0}, refused = 0, id = 1, now = 0;
  Departure out[16];
  Item exp[4];
  for (int step = 0; step < 200'000; ++step) {
    now += rng() % 20'000;
    if (rng() % 1000 == 0) now += 50'000'000;  // stalls
    for (unsigned k = rng() % 6; k > 0; --k) {
      const unsigned c = rng() % 3;
      ++offered[c];
      if (s.enqueue(c, pkt(id), 60 + rng() % 1455, now)) {
        outstanding.insert(id);
      } else {
        ++refused;
      }
      ++id;
    }
    if (rng() % 500 == 0) {
      ASSERT_TRUE(s.set_class_rate(rng() % 3, rng() % 8000, 0, now));
    }
    unsigned n_exp = 0;
    const unsigned n = s.poll(now, out, 16, exp, 4, &n_exp);
    for (unsigned i = 0; i < n; ++i) ASSERT_EQ(outstanding.erase(id_of(out[i].pkt)), 1u);
    for (unsigned i = 0; i < n_exp; ++i) ASSERT_EQ(outstanding.erase(id_of(exp[i].pkt)), 1u);
  }
  const uint64_t drained = s.drain([&](const Item& it) { outstanding.erase(id_of(it.pkt)); });
  EXPECT_TRUE(outstanding.empty());
  EXPECT_EQ(s.backlog(), 0u);
  uint64_t depth_drops = 0, drained_sum = 0;
  for (unsigned c = 0; c < 3; ++c) {
    const ClassStats st = s.class_stats(c);
    EXPECT_EQ(st.enq_packets + st.drop_depth, offered[c]) << c;
    EXPECT_EQ(st.enq_packets, st.tx_packets + st.drop_ttl + st.drained + st.queue_len) << c;
    EXPECT_EQ(st.queue_len, 0u);
    EXPECT_GT(st.tx_packets, 0u) << c;
    depth_drops += st.drop_depth;
    drained_sum += st.drained;
  }
  EXPECT_EQ(depth_drops, refused);
  EXPECT_EQ(drained_sum, drained);
  const PortStats ps = s.port_stats();
  EXPECT_GT(ps.drop_ttl, 0u);
  EXPECT_GT(ps.drop_depth, 0u);
  EXPECT_GT(ps.stall_clamps, 0u);
  EXPECT_EQ(ps.enq_packets, ps.tx_packets + ps.drop_ttl + ps.drained);
}

TEST(Scheduler, DrainReturnsEverythingAndResets) {
  Scheduler s(make_drip(1), {make_class("a"), make_class("b")}, kHz);
  for (uint64_t i = 1; i <= 7; ++i) ASSERT_TRUE(s.enqueue(i % 2, pkt(i), 100, 0));
  std::vector<uint64_t> ids;
  EXPECT_EQ(s.drain([&](const Item& it) { ids.push_back(id_of(it.pkt)); }), 7u);
  std::sort(ids.begin(), ids.end());
  EXPECT_EQ(ids, (std::vector<uint64_t>{1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(s.next_departure(), kNever);
  EXPECT_EQ(s.class_stats(0).drained + s.class_stats(1).drained, 7u);
  EXPECT_EQ(s.drain([](const Item&) {}), 0u);
}

TEST(Scheduler, FindClassByName) {
  Scheduler s(make_drip(0), {make_class("gold"), make_class("default")}, kHz);
  EXPECT_EQ(s.num_classes(), 2u);
  EXPECT_EQ(s.find_class("default"), 1);
  EXPECT_EQ(s.find_class("gold"), 0);
  EXPECT_EQ(s.find_class("nope"), -1);
  EXPECT_EQ(s.class_name(1), "default");
}

TEST(Scheduler, StatsAreReadableFromAnotherThreadWhileTheOwnerRuns) {
  // The owner lcore enqueues and polls; a stats thread reads concurrently. Counters only grow
  // and the reader's final view matches. (Built with -fsanitize=thread this also shows the
  // counters are race-free.)
  Scheduler s(make_drip(0), {make_class("a", 1, 0, 0, 256), make_class("b")}, kHz);
  LatencyHist hist;
  std::atomic<bool> done{false};
  uint64_t reads = 0;
  bool monotonic = true;
  std::thread reader([&] {
    uint64_t last_tx = 0, last_hist = 0;
    while (!done.load(std::memory_order_acquire)) {
      const PortStats ps = s.port_stats();
      const uint64_t h = hist.snapshot().count;
      monotonic = monotonic && ps.tx_packets >= last_tx && h >= last_hist;
      last_tx = ps.tx_packets;
      last_hist = h;
      ++reads;
    }
  });
  Departure out[32];
  uint64_t id = 1;
  for (uint64_t now = 0; now < 200'000; ++now) {
    for (int k = 0; k < 3; ++k, ++id) (void)s.enqueue(id % 2, pkt(id), 100, now);
    const unsigned n = s.poll(now, out, 2, nullptr, 0, nullptr);
    for (unsigned i = 0; i < n; ++i) hist.record_ticks(static_cast<int64_t>(now % 100));
  }
  done.store(true, std::memory_order_release);
  reader.join();
  EXPECT_TRUE(monotonic);
  EXPECT_GT(reads, 0u);
  const PortStats ps = s.port_stats();
  EXPECT_EQ(ps.tx_packets, 400'000u);
  EXPECT_EQ(hist.snapshot().count, 400'000u);
  EXPECT_EQ(ps.enq_packets, ps.tx_packets + ps.backlog);
}

void expect_invalid(const config::Drip& d, const std::vector<config::Class>& c, uint64_t hz,
                    const std::string& needle) {
  try {
    Scheduler s(d, c, hz);
    ADD_FAILURE() << "accepted; expected an error naming " << needle;
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(Scheduler, ConstructorRejectsBadConfigNamingTheField) {
  expect_invalid(make_drip(0), {}, kHz, "classes");
  expect_invalid(make_drip(0, 0, 0), {make_class("a")}, kHz, "drip.batch");
  expect_invalid(make_drip(-5), {make_class("a")}, kHz, "drip.rate_pps");
  expect_invalid(make_drip(0, std::nan("")), {make_class("a")}, kHz, "drip.rate_bps");
  expect_invalid(make_drip(0), {make_class("a", 0)}, kHz, "classes.a.weight");
  expect_invalid(make_drip(0), {make_class("a", 1, 0, 0, 0)}, kHz, "classes.a.queue_depth");
  expect_invalid(make_drip(0), {make_class("a", 1, -1)}, kHz, "classes.a.rate_pps");
  expect_invalid(make_drip(0), {make_class("a"), make_class("a")}, kHz, "duplicate");
  expect_invalid(make_drip(0), {make_class("a")}, 0, "tsc_hz");
}

// One message per problem, so --check shows them all at once; the TSC rate only decides how low
// a rate may go.
TEST(Scheduler, ValidateListsEveryProblemAndJudgesRatesAtTheTscRate) {
  const std::vector<std::string> errors = Scheduler::validate(
      make_drip(-1, 0, 0), {make_class("a", 0), make_class("b", 1, 0, 0, 0), make_class("a")}, kHz);
  const std::vector<std::string> expected = {
      "drip.batch: must be >= 1", "drip.rate_pps: rate must be a finite number >= 0",
      "classes.a.weight: must be >= 1", "classes.b.queue_depth: must be >= 1",
      "classes.a.name: duplicate"};
  EXPECT_EQ(errors, expected);
  EXPECT_TRUE(Scheduler::validate(make_drip(1000), {make_class("a")}, kHz).empty());
  // 1e-5 pps is 1e14 ticks per packet at 1 GHz (under 2^48) but 1.1e17 at 2^40 Hz.
  const std::vector<config::Class> slow = {make_class("a", 1, 1e-5)};
  EXPECT_TRUE(Scheduler::validate(make_drip(0), slow, kHz).empty());
  const std::vector<std::string> fast_tsc = Scheduler::validate(make_drip(0), slow, kMaxTscHz);
  ASSERT_EQ(fast_tsc.size(), 1u);
  EXPECT_NE(fast_tsc[0].find("classes.a.rate_pps: rate_pps too low"), std::string::npos)
      << fast_tsc[0];
  // The constructor refuses what validate() lists.
  expect_invalid(make_drip(0), slow, kMaxTscHz, "classes.a.rate_pps");
}

// ---- timeline ----

// enqueue_burst is enqueue() packet by packet: same refusals (depth, bad class), counters and
// queue contents, with runs of classes interleaved.
TEST(Scheduler, EnqueueBurstMatchesEnqueueOneByOne) {
  const std::vector<config::Class> classes = {make_class("a", 1, 0, 0, 5),
                                              make_class("b", 3, 0, 0, 3)};
  Scheduler one(make_drip(0), classes, kHz);
  Scheduler burst(make_drip(0), classes, kHz);
  std::vector<EnqueueReq> reqs;
  const uint32_t cls_seq[] = {0, 0, 1, 1, 1, 1, 7, 0, 0, 0, 0, 0, 1, 0};
  uint64_t id = 1;
  for (uint32_t c : cls_seq) {
    reqs.push_back(EnqueueReq{pkt(id), 100 + id, c, static_cast<uint32_t>(60 + 10 * id)});
    ++id;
  }
  std::vector<uint64_t> refused_one;
  for (const EnqueueReq& r : reqs) {
    if (!one.enqueue(r.cls, r.pkt, r.frame_len, r.enq_tsc)) refused_one.push_back(id_of(r.pkt));
  }
  std::vector<void*> refused(reqs.size());
  const unsigned n_ref =
      burst.enqueue_burst(reqs.data(), static_cast<unsigned>(reqs.size()), refused.data());
  std::vector<uint64_t> refused_burst;
  for (unsigned i = 0; i < n_ref; ++i) refused_burst.push_back(id_of(refused[i]));
  EXPECT_EQ(refused_burst, refused_one);
  EXPECT_EQ(refused_burst, (std::vector<uint64_t>{6, 7, 11, 12, 13, 14}));
  for (unsigned c = 0; c < 2; ++c) {
    const ClassStats a = one.class_stats(c), b = burst.class_stats(c);
    EXPECT_EQ(a.enq_packets, b.enq_packets) << c;
    EXPECT_EQ(a.enq_bytes, b.enq_bytes) << c;
    EXPECT_EQ(a.drop_depth, b.drop_depth) << c;
    EXPECT_EQ(a.queue_len, b.queue_len) << c;
  }
  EXPECT_EQ(one.port_stats().drop_bad_class, 1u);
  EXPECT_EQ(burst.port_stats().drop_bad_class, 1u);
  EXPECT_EQ(one.backlog(), burst.backlog());
  Poller p1(one), p2(burst);
  p1.at(1000);
  p2.at(1000);
  ASSERT_EQ(p1.sent.size(), p2.sent.size());
  for (size_t i = 0; i < p1.sent.size(); ++i) {
    EXPECT_EQ(id_of(p1.sent[i].pkt), id_of(p2.sent[i].pkt)) << i;
    EXPECT_EQ(p1.sent[i].scheduled_tsc, p2.sent[i].scheduled_tsc) << i;
  }
}

// Two pollers released the same packets of the same classes in the same order, and expired
// the same ones (some).
void expect_same_departures_and_expiries(const Poller& a, const Poller& b) {
  ASSERT_EQ(a.sent.size(), b.sent.size());
  for (size_t i = 0; i < a.sent.size(); ++i) {
    ASSERT_EQ(id_of(a.sent[i].pkt), id_of(b.sent[i].pkt)) << i;
    ASSERT_EQ(a.sent[i].cls, b.sent[i].cls) << i;
  }
  ASSERT_EQ(a.expired.size(), b.expired.size());
  for (size_t i = 0; i < a.expired.size(); ++i) {
    EXPECT_EQ(id_of(a.expired[i].pkt), id_of(b.expired[i].pkt)) << i;
  }
  EXPECT_GT(b.expired.size(), 0u);
}

// Unlimited port and classes with batch > 1 take the whole-run path in poll(): DRR order, TTL
// expiry and the per-class order must be those of the one-departure-per-slot path (batch 1),
// and the counters must add up.
TEST(Scheduler, UnlimitedBatchRunKeepsDrrOrderAndTtl) {
  const std::vector<config::Class> classes = {make_class("a", 1, 0, 0, 4096, 1),
                                              make_class("b", 2, 0, 0, 4096, 1)};
  Scheduler s1(make_drip(0, 0, 1), classes, kHz);
  Scheduler s32(make_drip(0, 0, 32), classes, kHz);
  std::mt19937_64 rng(7);
  const uint64_t now = 5'000'000;
  for (uint64_t id = 1; id <= 3000; ++id) {
    const unsigned c = rng() % 4 == 0 ? 0u : 1u;
    const uint32_t len = 60 + static_cast<uint32_t>(rng() % 1455);
    // Some stamps older than the 1 ms TTL at `now`, the rest within it.
    const uint64_t stamp = rng() % 10 == 0 ? now - 2'000'000 : now - 1000 + rng() % 1000;
    ASSERT_TRUE(s1.enqueue(c, pkt(id), len, stamp));
    ASSERT_TRUE(s32.enqueue(c, pkt(id), len, stamp));
  }
  Poller p1(s1), p32(s32);
  while (s1.backlog() != 0) p1.at(now, 7, 5);  // small arrays: runs cut by max_out too
  while (s32.backlog() != 0) p32.at(now, 7, 5);
  expect_same_departures_and_expiries(p1, p32);
  for (unsigned c = 0; c < 2; ++c) {
    const ClassStats a = s1.class_stats(c), b = s32.class_stats(c);
    EXPECT_EQ(a.tx_packets, b.tx_packets);
    EXPECT_EQ(a.tx_bytes, b.tx_bytes);
    EXPECT_EQ(a.drop_ttl, b.drop_ttl);
    EXPECT_EQ(b.queue_len, 0u);
    EXPECT_EQ(b.enq_packets, b.tx_packets + b.drop_ttl);
  }
}

// A run from the only backlogged class renews its turn in place (no DRR scan): departures,
// TTL expiry and the deficit it keeps (seen in the order once the other classes are backlogged
// again) must match the one-departure-per-slot path, jumbo frames and frames that land the
// deficit on an exact quantum boundary included.
TEST(Scheduler, UnlimitedBatchRunOfTheOnlyBackloggedClassKeepsDrr) {
  const std::vector<config::Class> classes = {make_class("a", 1, 0, 0, 4096, 1),
                                              make_class("b", 2, 0, 0, 4096, 1),
                                              make_class("c", 1, 0, 0, 4096, 1)};
  Scheduler s1(make_drip(0, 0, 1), classes, kHz);
  Scheduler s32(make_drip(0, 0, 32), classes, kHz);
  Poller p1(s1), p32(s32);
  std::mt19937_64 rng(11);
  const uint64_t now = 5'000'000;
  uint64_t id = 1;
  auto fill = [&](unsigned c, unsigned n) {
    static constexpr uint32_t kLens[] = {64, 256, 768, 1536, 3072, 4608};
    for (unsigned k = 0; k < n; ++k) {
      const uint32_t len = rng() % 2 == 0   ? kLens[rng() % 6]
                           : rng() % 8 == 0 ? 3000 + static_cast<uint32_t>(rng() % 6000)
                                            : 60 + static_cast<uint32_t>(rng() % 200);
      const uint64_t stamp = rng() % 20 == 0 ? now - 2'000'000 : now - rng() % 1000;
      ASSERT_TRUE(s1.enqueue(c, pkt(id), len, stamp));
      ASSERT_TRUE(s32.enqueue(c, pkt(id), len, stamp));
      ++id;
    }
  };
  // Phase 1: b alone, then a and c a little so b is alone again once they are empty; each
  // phase polled down to a few packets so every class keeps a deficit into the next phase.
  for (int phase = 0; phase < 40; ++phase) {
    fill(phase % 3 == 0 ? 1u : static_cast<unsigned>(rng() % 3), 200 + rng() % 400);
    if (phase % 4 == 3) {
      fill(0, 5);
      fill(2, 3);
    }
    const unsigned max_out = 5 + static_cast<unsigned>(rng() % 40);
    while (s32.backlog() > 20) p32.at(now, max_out);
    while (p1.sent.size() < p32.sent.size()) {
      p1.at(now, static_cast<unsigned>(p32.sent.size() - p1.sent.size()));
    }
    ASSERT_EQ(s1.backlog(), s32.backlog()) << phase;
  }
  while (s32.backlog() != 0) p32.at(now, 7);
  while (s1.backlog() != 0) p1.at(now, 7);
  expect_same_departures_and_expiries(p1, p32);
}

// Arrivals between polls (the fast path's rhythm: a received burst, then a poll that may stop
// short at max_out) must not make batch 32 depart in another order than batch 1 at unlimited
// rate: many seeds, three classes of different weights, frames from tiny to jumbo.
TEST(Scheduler, UnlimitedBatchMatchesBatchOneWithArrivalsBetweenPolls) {
  const std::vector<config::Class> classes = {make_class("a", 1), make_class("b", 3),
                                              make_class("c", 2)};
  for (uint64_t seed = 1; seed <= 300; ++seed) {
    Scheduler s1(make_drip(0, 0, 1), classes, kHz);
    Scheduler s32(make_drip(0, 0, 32), classes, kHz);
    Poller p1(s1), p32(s32);
    std::mt19937_64 rng(seed);
    uint64_t id = 1;
    for (int round = 0; round < 60; ++round) {
      const unsigned n = static_cast<unsigned>(rng() % 40);
      for (unsigned k = 0; k < n; ++k) {
        const unsigned c = static_cast<unsigned>(rng() % 3);
        const uint32_t len = rng() % 16 == 0 ? 2000 + static_cast<uint32_t>(rng() % 7000)
                                             : 60 + static_cast<uint32_t>(rng() % 1455);
        ASSERT_TRUE(s1.enqueue(c, pkt(id), len, 10));
        ASSERT_TRUE(s32.enqueue(c, pkt(id), len, 10));
        ++id;
      }
      const unsigned max_out = 1 + static_cast<unsigned>(rng() % 48);
      p32.at(100, max_out);
      while (p1.sent.size() < p32.sent.size())
        p1.at(100, static_cast<unsigned>(p32.sent.size() - p1.sent.size()));
      ASSERT_EQ(p1.sent.size(), p32.sent.size());
      for (size_t i = 0; i < p1.sent.size(); ++i)
        ASSERT_EQ(id_of(p1.sent[i].pkt), id_of(p32.sent[i].pkt))
            << "seed " << seed << " round " << round << " departure " << i;
    }
  }
}

// The renewed turn's deficit on an exact quantum boundary: a alone with full-quantum frames
// ends each turn at 0 and gets exactly one quantum back, so once c is backlogged too the two
// alternate frame by frame (as with one departure per slot).
TEST(Scheduler, UnlimitedBatchRunRenewsTheSoleTurnByExactQuanta) {
  const std::vector<config::Class> classes = {make_class("a", 1), make_class("c", 1)};
  Scheduler s1(make_drip(0, 0, 1), classes, kHz);
  Scheduler s32(make_drip(0, 0, 32), classes, kHz);
  Poller p1(s1), p32(s32);
  for (uint64_t id = 1; id <= 40; ++id) {
    ASSERT_TRUE(s1.enqueue(0, pkt(id), kQuantumBytes, 0));
    ASSERT_TRUE(s32.enqueue(0, pkt(id), kQuantumBytes, 0));
  }
  ASSERT_EQ(p32.at(1, 20).size(), 20u);
  while (p1.sent.size() < 20) p1.at(1, static_cast<unsigned>(20 - p1.sent.size()));
  for (uint64_t id = 41; id <= 60; ++id) {
    ASSERT_TRUE(s1.enqueue(1, pkt(id), kQuantumBytes, 1));
    ASSERT_TRUE(s32.enqueue(1, pkt(id), kQuantumBytes, 1));
  }
  while (s32.backlog() != 0) p32.at(2);
  while (s1.backlog() != 0) p1.at(2);
  ASSERT_EQ(p32.sent.size(), 60u);
  ASSERT_EQ(p1.sent.size(), 60u);
  for (size_t i = 0; i < 60; ++i) {
    EXPECT_EQ(id_of(p1.sent[i].pkt), id_of(p32.sent[i].pkt)) << i;
  }
  // After the first 20 (a alone) the classes take turns, one frame each.
  for (size_t i = 20; i + 1 < 60; i += 2) EXPECT_NE(p32.sent[i].cls, p32.sent[i + 1].cls) << i;
}

// Scheduled times in an unlimited batch: the slot's time or a later enqueue stamp; and the
// timelines are left as packet-by-packet booking leaves them, so a rate set afterwards re-bases
// on the right departures.
TEST(Scheduler, UnlimitedBatchRunStampsAndTimelineState) {
  Scheduler s(make_drip(0, 0, 32), {make_class("a")}, kHz);
  const uint64_t stamps[] = {10, 20, 5, 30, 25};
  uint64_t id = 1;
  for (uint64_t t : stamps) ASSERT_TRUE(s.enqueue(0, pkt(id++), 100, t));
  Poller p(s);
  const auto out = p.at(100);
  ASSERT_EQ(out.size(), 5u);
  const uint64_t want[] = {10, 20, 20, 30, 30};
  for (size_t i = 0; i < 5; ++i) EXPECT_EQ(out[i].scheduled_tsc, want[i]) << i;
  // Port: the last booking is the slot (10), so 1 Mpps re-bases to 10 + 1000.
  ASSERT_TRUE(s.set_port_rate(1e6, 0, 100));
  ASSERT_TRUE(s.enqueue(0, pkt(id++), 100, 100));
  EXPECT_EQ(s.next_departure(), 1010u);
  // Class: its last booking was at 30, so a 1 Mpps cap re-bases it to 1030.
  ASSERT_TRUE(s.set_class_rate(0, 1e6, 0, 100));
  EXPECT_EQ(s.next_departure(), 1030u);
}

TEST(Scheduler, BypassOnlyForAnEmptyUnlimitedClassOnAnUnlimitedPort) {
  Scheduler s(make_drip(0), {make_class("a"), make_class("capped", 1, 1e6)}, kHz);
  EXPECT_TRUE(s.bypasses(0));
  EXPECT_FALSE(s.bypasses(1)) << "a class with its own cap must queue";
  EXPECT_FALSE(s.bypasses(2)) << "no such class";
  ASSERT_TRUE(s.enqueue(0, pkt(1), 100, 0));
  EXPECT_FALSE(s.bypasses(0)) << "a packet already waits: the next must queue behind it";
  Poller p(s);
  ASSERT_EQ(p.at(0).size(), 1u);
  EXPECT_TRUE(s.bypasses(0));
  ASSERT_TRUE(s.set_port_rate(1000, 0, 0));
  EXPECT_FALSE(s.bypasses(0)) << "a limited port must queue";
  ASSERT_TRUE(s.set_port_rate(0, 0, 0));
  EXPECT_TRUE(s.bypasses(0));
  ASSERT_TRUE(s.set_class_rate(0, 0, 8e6, 0));
  EXPECT_FALSE(s.bypasses(0)) << "a bit-rate cap counts as a cap";
}

// depart_now() must leave the scheduler exactly as enqueue() + poll() of the same packets, one
// per slot, would: the same scheduled times, counters and timeline bookings (which a later rate
// change re-bases on).
TEST(Scheduler, BypassCountsAndBooksLikeEnqueueAndPoll) {
  auto classes = [] { return std::vector{make_class("a"), make_class("b")}; };
  Scheduler by(make_drip(0), classes(), kHz), q(make_drip(0), classes(), kHz);
  Poller pq(q);
  struct Run {
    unsigned cls;
    std::vector<std::pair<uint64_t, uint32_t>> pkts;  // stamp, frame_len
    uint64_t now;
  };
  const Run runs[] = {
      {0, {{100, 64}, {100, 1500}, {90, 200}}, 150},
      {1, {{160, 64}}, 170},
      {0, {{175, 300}, {180, 60}}, 200},
      {1, {{150, 70}, {210, 80}}, 220},  // a stamp older than the class's last booking
  };
  uint64_t id = 1;
  for (const Run& r : runs) {
    ASSERT_TRUE(by.bypasses(r.cls));
    uint64_t bytes = 0, max_stamp = 0;
    for (auto [stamp, len] : r.pkts) {
      bytes += len;
      max_stamp = std::max(max_stamp, stamp);
      ASSERT_TRUE(q.enqueue(r.cls, pkt(id++), len, stamp));
    }
    const uint64_t at = by.depart_now(r.cls, r.pkts.size(), bytes, r.pkts.back().second, max_stamp);
    const auto out = pq.at(r.now);
    ASSERT_EQ(out.size(), r.pkts.size());
    EXPECT_EQ(at, out.back().scheduled_tsc) << "run at " << r.now;
  }
  for (unsigned c = 0; c < 2; ++c) {
    const ClassStats a = by.class_stats(c), b = q.class_stats(c);
    EXPECT_EQ(a.enq_packets, b.enq_packets);
    EXPECT_EQ(a.enq_bytes, b.enq_bytes);
    EXPECT_EQ(a.tx_packets, b.tx_packets);
    EXPECT_EQ(a.tx_bytes, b.tx_bytes);
    EXPECT_EQ(a.queue_len, 0u);
  }
  EXPECT_EQ(by.port_stats().tx_packets, 8u);
  // The timelines' bookings: a cap on class a and then a port rate re-base identically.
  for (Scheduler* s : {&by, &q}) {
    ASSERT_TRUE(s->set_class_rate(0, 1e6, 0, 230));
    ASSERT_TRUE(s->enqueue(0, pkt(100), 100, 230));
  }
  EXPECT_EQ(by.next_departure(), q.next_departure());
  EXPECT_EQ(by.next_departure(), 1180u) << "class a last booked at 180";
  for (Scheduler* s : {&by, &q}) ASSERT_TRUE(s->set_port_rate(1e5, 0, 230));
  EXPECT_EQ(by.next_departure(), q.next_departure());
}

TEST(Timeline, IntervalsRoundUpOnTheFixedPointGrid) {
  Timeline t;
  t.set_rate(3e8, 0, kHz, 0);  // 10/3 ticks
  const Fixed iv = t.interval(64);
  EXPECT_EQ(iv >> kFracBits, 3u);
  // ceil(2^32 / 3) = 1431655766
  EXPECT_EQ(static_cast<uint64_t>(iv & 0xffffffffu), 1431655766u);
  t.set_rate(0, 8e9, kHz, 0);  // exactly one tick per wire byte
  EXPECT_EQ(t.interval(64), to_fixed(88));
  t.set_rate(2.5, 0, 10, 0);  // non-integral rate takes the double path: 4 ticks exactly
  EXPECT_EQ(t.interval(1), to_fixed(4));
  EXPECT_FALSE(Timeline().limited());
  EXPECT_TRUE(Timeline().permits(0));
}

// ---- latency histogram ----

TEST(LatencyHist, BucketsTileTheRange) {
  uint64_t expect_low = 0;
  for (unsigned i = 0; i < LatencyHist::kBuckets; ++i) {
    ASSERT_EQ(LatencyHist::bucket_low(i), expect_low) << i;
    ASSERT_GE(LatencyHist::bucket_high(i), LatencyHist::bucket_low(i));
    ASSERT_EQ(LatencyHist::bucket_of(LatencyHist::bucket_low(i)), i);
    ASSERT_EQ(LatencyHist::bucket_of(LatencyHist::bucket_high(i)), i);
    expect_low = LatencyHist::bucket_high(i) + 1;
  }
  EXPECT_EQ(expect_low, 0u);  // the last bucket ends at UINT64_MAX
  for (uint64_t m : {1023ull, 1024ull, 1055ull, 1056ull, 123456789ull}) {
    const unsigned i = LatencyHist::bucket_of(m);
    EXPECT_LE(LatencyHist::bucket_low(i), m);
    EXPECT_GE(LatencyHist::bucket_high(i), m);
    // Log-linear: a bucket is at most 1/32 of its lower edge wide.
    EXPECT_LE(LatencyHist::bucket_high(i) - LatencyHist::bucket_low(i),
              std::max<uint64_t>(LatencyHist::bucket_low(i) / 32, 0));
  }
}

TEST(LatencyHist, SharesWithinAreExactAndPercentilesSigned) {
  LatencyHist h;
  // 1000 samples: -600..399 ns step 1.
  for (int64_t v = -600; v < 400; ++v) h.record_ns(v);
  const auto s = h.snapshot();
  EXPECT_EQ(s.count, 1000u);
  EXPECT_EQ(s.min_ns, -600);
  EXPECT_EQ(s.max_ns, 399);
  EXPECT_EQ(s.count_within(64), 129u);  // -64..64
  EXPECT_EQ(s.count_within(128), 257u);
  EXPECT_EQ(s.count_within(256), 513u);
  EXPECT_EQ(s.count_within(512), 512u + 400u);  // -512..-1 and 0..399
  EXPECT_DOUBLE_EQ(s.share_within(64), 0.129);
  EXPECT_EQ(s.percentile(0), -600);
  EXPECT_EQ(s.percentile(50), -101);  // 500th smallest
  EXPECT_EQ(s.percentile(100), 399);
  EXPECT_DOUBLE_EQ(s.mean_ns(), -100.5);
}

TEST(LatencyHist, LargeValuesAndTickConversion) {
  LatencyHist h(2'000'000'000);  // 2 GHz: 2 ticks per ns
  h.record_ticks(3);             // 1.5 ns rounds to 2
  h.record_ticks(-4);            // -2 ns
  h.record_ticks(2'000'000);     // 1 ms
  h.record_ns(std::numeric_limits<int64_t>::min());
  const auto s = h.snapshot();
  EXPECT_EQ(s.count, 4u);
  EXPECT_EQ(s.pos[2], 1u);
  EXPECT_EQ(s.neg[2], 1u);
  EXPECT_EQ(s.max_ns, 1'000'000);
  EXPECT_EQ(s.min_ns, std::numeric_limits<int64_t>::min());
  const int64_t p100 = s.percentile(100);
  EXPECT_NEAR(static_cast<double>(p100), 1e6, 1e6 / 32);
  EXPECT_EQ(s.count_within(2), 2u);
  EXPECT_EQ(LatencyHist().snapshot().percentile(50), 0);
}

// A weighted record is n records of one value: same buckets, count, sum, min, max and
// percentiles as recording each packet on its own.
TEST(LatencyHist, WeightedRecordEqualsRepeatedRecords) {
  LatencyHist one(2'000'000'000), many(2'000'000'000);
  const std::pair<int64_t, uint64_t> samples[] = {{7, 3}, {-4, 5},         {2'000'000, 2}, {0, 31},
                                                  {3, 1}, {-2'000'000, 4}, {5, 0}};
  for (const auto& [ticks, n] : samples) {
    for (uint64_t i = 0; i < n; ++i) one.record_ticks(ticks);
    many.record_ticks_n(ticks, n);
  }
  one.record_ns(-123);
  many.record_ns_n(-123, 1);
  const auto a = one.snapshot(), b = many.snapshot();
  EXPECT_EQ(b.count, 47u);
  EXPECT_EQ(many.count(), 47u);
  EXPECT_EQ(a.count, b.count);
  EXPECT_EQ(a.pos, b.pos);
  EXPECT_EQ(a.neg, b.neg);
  EXPECT_EQ(a.sum_ns, b.sum_ns);
  EXPECT_EQ(b.sum_ns, 3 * 4 - 5 * 2 + 2 * 1'000'000 + 2 - 4 * 1'000'000 - 123);
  EXPECT_EQ(a.min_ns, b.min_ns);
  EXPECT_EQ(b.min_ns, -1'000'000);
  EXPECT_EQ(a.max_ns, b.max_ns);
  EXPECT_EQ(b.max_ns, 1'000'000);
  EXPECT_EQ(b.pos[0], 31u);
  EXPECT_EQ(b.neg[2], 5u);
  for (double p : {1.0, 10.0, 50.0, 90.0, 99.0}) EXPECT_EQ(a.percentile(p), b.percentile(p)) << p;
  // Zero packets record nothing, not even min/max.
  LatencyHist empty;
  empty.record_ns_n(-99, 0);
  EXPECT_EQ(empty.count(), 0u);
  EXPECT_EQ(empty.snapshot().min_ns, 0);
}

}  // namespace
}  // namespace dripgate::dataplane
