// Inside the scheduler: tenant and flow fairness within a class, strict priority among
// classes, CoDel AQM with ECN, and drops counted per tenant; injected clock (1 tick = 1 ns).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <vector>

#include "dataplane/scheduler.h"
#include "dataplane/scheduler_test_util.h"

namespace dripgate::dataplane {
namespace {

using namespace scheduler_test;

constexpr uint64_t kUs = 1000;
constexpr uint64_t kMs = 1'000'000;

config::Class fair_class(const std::string& name, config::Fairness f = config::Fairness::kTenant,
                         uint32_t depth = 100000) {
  config::Class c = make_class(name, 1, 0, 0, depth);
  c.fairness = f;
  return c;
}

// Packet ids carry their tenant: tenant * 1,000,000 + sequence.
void* tpkt(uint32_t tenant, uint64_t seq) {
  return pkt(uint64_t{tenant} * 1'000'000 + seq);
}
uint32_t tenant_of(const Departure& d) {
  return static_cast<uint32_t>(id_of(d.pkt) / 1'000'000);
}

TEST(SchedulerFairness, BackloggedTenantsShareTheirClassByBytesWithinOnePercent) {
  Scheduler s(make_drip(100'000), {fair_class("bulk")}, kHz);
  // Tenant 1 sends 64 B frames, 2 1514 B, 3 9000 B jumbo frames, 4 a mix; all backlogged.
  for (uint64_t i = 1; i <= 20000; ++i) {
    ASSERT_TRUE(s.enqueue(0, tpkt(1, i), 64, 0, 1));
    ASSERT_TRUE(s.enqueue(0, tpkt(2, i), 1514, 0, 2));
    ASSERT_TRUE(s.enqueue(0, tpkt(3, i), 9000, 0, 3));
    ASSERT_TRUE(s.enqueue(0, tpkt(4, i), i % 2 ? 200 : 1400, 0, 4));
  }
  Poller p{s};
  p.until(200 * kMs);  // 20,000 departures; tenant 1's 1.28 MB lasts the whole window
  std::map<uint32_t, uint64_t> bytes;
  uint64_t total = 0;
  for (const Departure& d : p.sent) {
    bytes[tenant_of(d)] += d.frame_len;
    total += d.frame_len;
  }
  ASSERT_EQ(p.sent.size(), 20001u);
  for (uint32_t t = 1; t <= 4; ++t)
    EXPECT_NEAR(double(bytes[t]) / double(total), 0.25, 0.0025) << "tenant " << t;
}

// The delays of a steady tenant's packets (one every ms) while another tenant has 500 packets
// queued in the same class, at a port of 10,000 packets/s.
std::vector<uint64_t> steady_delays(config::Fairness f) {
  config::Class c = fair_class("bulk", f);
  Scheduler s(make_drip(10'000), {c}, kHz);
  for (uint64_t i = 1; i <= 500; ++i) EXPECT_TRUE(s.enqueue(0, tpkt(1, i), 1000, 0, 1, 1));
  Poller p{s};
  std::map<uint64_t, uint64_t> sent_at;
  for (uint64_t t = 0; t <= 40 * kMs; t += 100 * kUs) {
    if (t % kMs == 0) {
      EXPECT_TRUE(s.enqueue(0, tpkt(2, t / kMs + 1), 1000, t, 2, 2));
    }
    for (const Departure& d : p.at(t)) {
      if (tenant_of(d) == 2) sent_at[id_of(d.pkt) % 1'000'000] = d.scheduled_tsc;
    }
  }
  std::vector<uint64_t> delays;
  for (uint64_t k = 1; k <= 41; ++k) {
    auto it = sent_at.find(k);
    delays.push_back(it == sent_at.end() ? kNever : it->second - (k - 1) * kMs);
  }
  return delays;
}

TEST(SchedulerFairness, ABurstingTenantDoesNotDelayASteadyTenantInTheSameClass) {
  // Fair: each steady packet waits at most for the bursting tenant's current quantum (one or
  // two 1000 B frames, 100 us apart) and its own slot.
  for (uint64_t d : steady_delays(config::Fairness::kTenant)) EXPECT_LE(d, 300 * kUs);
  // One FIFO: the steady packets wait behind the 500 (50 ms at 10,000/s) or are not sent yet.
  const std::vector<uint64_t> fifo = steady_delays(config::Fairness::kNone);
  EXPECT_GE(*std::min_element(fifo.begin(), fifo.end()), 10 * kMs);
}

TEST(SchedulerFairness, FlowFairnessSeparatesTheFlowsOfOneTenantAndTenantFairnessDoesNot) {
  for (config::Fairness f : {config::Fairness::kFlow, config::Fairness::kTenant}) {
    Scheduler s(make_drip(10'000), {fair_class("bulk", f)}, kHz);
    for (uint64_t i = 1; i <= 100; ++i) ASSERT_TRUE(s.enqueue(0, tpkt(1, i), 1000, 0, 1, 7));
    ASSERT_TRUE(s.enqueue(0, tpkt(1, 500), 1000, 0, 1, 8));  // same tenant, another flow
    Poller p{s};
    p.until(20 * kMs);
    size_t pos = 0;
    while (pos < p.sent.size() && id_of(p.sent[pos].pkt) % 1'000'000 != 500) ++pos;
    if (f == config::Fairness::kFlow) {
      EXPECT_LE(pos, 2u);
    } else {
      EXPECT_EQ(pos, 100u);
    }
  }
}

TEST(SchedulerFairness, UntaggedFlowsAreSourcesOfTheirOwnUnderTenantFairness) {
  Scheduler s(make_drip(10'000), {fair_class("bulk")}, kHz);
  for (uint64_t i = 1; i <= 100; ++i) ASSERT_TRUE(s.enqueue(0, tpkt(0, i), 1000, 0, 0, 11));
  ASSERT_TRUE(s.enqueue(0, tpkt(0, 500), 1000, 0, 0, 12));
  Poller p{s};
  p.until(kMs);
  std::vector<uint64_t> first;
  for (const Departure& d : p.sent) first.push_back(id_of(d.pkt));
  ASSERT_GE(first.size(), 3u);
  EXPECT_TRUE(std::find(first.begin(), first.begin() + 3, 500u) != first.begin() + 3);
}

TEST(SchedulerFairness, ATenantDepthCapsOneTenantAndDropsAreCountedPerTenant) {
  config::Class c = fair_class("bulk", config::Fairness::kTenant, 100);
  c.tenant_depth = 10;
  Scheduler s(make_drip(1000), {c}, kHz);
  unsigned ok1 = 0, ok2 = 0;
  for (uint64_t i = 1; i <= 50; ++i) ok1 += s.enqueue(0, tpkt(1, i), 100, 0, 1);
  for (uint64_t i = 1; i <= 5; ++i) ok2 += s.enqueue(0, tpkt(2, i), 100, 0, 2);
  EXPECT_EQ(ok1, 10u);
  EXPECT_EQ(ok2, 5u);
  const ClassStats st = s.class_stats(0);
  EXPECT_EQ(st.drop_subqueue, 40u);
  EXPECT_EQ(st.drop_depth, 0u);
  EXPECT_EQ(st.queue_len, 15u);
  EXPECT_EQ(st.active_subqueues, 2u);
  const std::vector<TenantDrops> top = s.top_tenant_drops(5);
  ASSERT_EQ(top.size(), 1u);
  EXPECT_EQ(top[0].tenant, 1u);
  EXPECT_EQ(top[0].depth, 40u);
  EXPECT_EQ(s.port_stats().drop_subqueue, 40u);
}

TEST(SchedulerFairness, TopTenantDropsAreOrderedAndBounded) {
  config::Class c = fair_class("bulk", config::Fairness::kTenant, 1000);
  c.tenant_depth = 1;
  Scheduler s(make_drip(1000), {c}, kHz);
  // Tenant t offers t + 1 packets: one fits, t are dropped. 70000 is beyond the counted ids
  // and counts as 0.
  for (uint32_t t : {3u, 9u, 5u, 70000u})
    for (uint64_t i = 0; i <= (t == 70000 ? 2 : t); ++i) (void)s.enqueue(0, tpkt(t, i), 100, 0, t);
  const std::vector<TenantDrops> top = s.top_tenant_drops(3);
  ASSERT_EQ(top.size(), 3u);
  EXPECT_EQ(top[0].tenant, 9u);
  EXPECT_EQ(top[0].total(), 9u);
  EXPECT_EQ(top[1].tenant, 5u);
  EXPECT_EQ(top[2].tenant, 3u);
  const std::vector<TenantDrops> all = s.top_tenant_drops(10);
  ASSERT_EQ(all.size(), 4u);
  EXPECT_EQ(all[3].tenant, 0u);
}

TEST(SchedulerFairness, TenThousandTenantsInOneClassAreServedInTurn) {
  config::Class c = fair_class("bulk", config::Fairness::kTenant, 20000);
  c.subqueues = 16384;
  Scheduler s(make_drip(0), {c}, kHz);
  for (uint32_t t = 1; t <= 10000; ++t) {
    ASSERT_TRUE(s.enqueue(0, tpkt(t, 1), 1500, 0, t));
    ASSERT_TRUE(s.enqueue(0, tpkt(t, 2), 1500, 0, t));
  }
  EXPECT_EQ(s.class_stats(0).active_subqueues, 10000u);
  Poller p{s};
  p.at(0, 20000);
  ASSERT_EQ(p.sent.size(), 20000u);
  // A tenant's turn lasts while its credit is positive: a 1536 B quantum pays for a 1500 B
  // frame and leaves 36 B, enough to start the second. Tenants in the order they came.
  for (uint32_t k = 0; k < 10000; ++k) {
    EXPECT_EQ(tenant_of(p.sent[2 * k]), k + 1);
    EXPECT_EQ(tenant_of(p.sent[2 * k + 1]), k + 1);
  }
}

TEST(SchedulerFairness, StrictPriorityServesTheHigherClassFirstUpToItsCap) {
  config::Class hi = fair_class("interactive"), lo = fair_class("bulk");
  hi.priority = 0;
  lo.priority = 1;
  {
    Scheduler s(make_drip(10'000), {lo, hi}, kHz);  // YAML order does not matter
    for (uint64_t i = 1; i <= 50; ++i) ASSERT_TRUE(s.enqueue(0, tpkt(1, i), 100, 0, 1));
    for (uint64_t i = 1; i <= 50; ++i) ASSERT_TRUE(s.enqueue(1, tpkt(2, i), 100, 0, 2));
    Poller p{s};
    p.until(kNever - 1);
    ASSERT_EQ(p.sent.size(), 100u);
    for (size_t k = 0; k < 50; ++k) EXPECT_EQ(p.sent[k].cls, 1u) << k;
  }
  {
    // Capped at a quarter of the port: the rest goes to the lower class, none is lost.
    hi.rate_pps = 2500;
    Scheduler s(make_drip(10'000), {hi, lo}, kHz);
    for (uint64_t i = 1; i <= 10000; ++i) {
      ASSERT_TRUE(s.enqueue(0, tpkt(1, i), 100, 0, 1));
      ASSERT_TRUE(s.enqueue(1, tpkt(2, i), 100, 0, 2));
    }
    Poller p{s};
    p.until(kMs * 1000 - 1);  // one second
    uint64_t n_hi = 0;
    for (const Departure& d : p.sent) n_hi += d.cls == 0;
    EXPECT_NEAR(double(n_hi), 2500.0, 2.0);
    EXPECT_NEAR(double(p.sent.size()), 10'000.0, 2.0);
  }
}

TEST(SchedulerFairness, AHigherPriorityArrivalTakesTheNextSlotFromALowerClassTurn) {
  config::Class hi = fair_class("interactive"), lo = fair_class("bulk");
  hi.priority = 0;
  lo.priority = 1;
  lo.weight = 100;  // a long turn: 100 quanta
  Scheduler s(make_drip(10'000), {hi, lo}, kHz);
  for (uint64_t i = 1; i <= 100; ++i) ASSERT_TRUE(s.enqueue(1, tpkt(1, i), 100, 0, 1));
  Poller p{s};
  p.at(0);
  p.at(100 * kUs);
  ASSERT_TRUE(s.enqueue(0, tpkt(2, 1), 100, 150 * kUs, 2));
  const std::vector<Departure> d = p.at(200 * kUs);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].cls, 0u);
  EXPECT_EQ(p.at(300 * kUs)[0].cls, 1u);  // the lower class's turn resumes
}

TEST(SchedulerFairness, WeightsShareAmongClassesOfOnePriority) {
  config::Class a = make_class("a", 3, 0, 0, 5000), b = make_class("b", 1, 0, 0, 5000),
                top = make_class("top");
  a.priority = b.priority = 2;
  top.priority = 1;  // never backlogged: does not take from the band below
  Scheduler s(make_drip(10'000), {a, b, top}, kHz);
  for (uint64_t i = 1; i <= 4000; ++i) {
    ASSERT_TRUE(s.enqueue(0, pkt(i), 1000, 0));
    ASSERT_TRUE(s.enqueue(1, pkt(10000 + i), 1000, 0));
  }
  Poller p{s};
  p.until(400 * kMs - 1);
  uint64_t n_a = 0;
  for (const Departure& d : p.sent) n_a += d.cls == 0;
  EXPECT_NEAR(double(n_a) / double(p.sent.size()), 0.75, 0.0075);
}

// A class paced at 1,000 packets/s offered 1,100/s for 20 s by tenant 1 (and, when
// `light_tenant`, 100/s more by tenant 2): returns the scheduler's class stats, and the
// median sojourn of the departures of the last 10 s.
struct AqmRun {
  ClassStats st;
  uint64_t median_sojourn_late = 0;
  uint64_t ce_departures = 0;
  std::vector<TenantDrops> drops;
};
AqmRun run_aqm(config::Fairness f, bool ecn, bool ect, bool light_tenant, bool aqm = true) {
  config::Class c = fair_class("bulk", f, 100000);
  c.ttl_ms = 0;
  if (aqm) c.aqm = config::Aqm{5, 100, ecn};
  Scheduler s(make_drip(1000), {c}, kHz);
  Poller p{s};
  std::vector<uint64_t> late;
  AqmRun r;
  uint64_t seq = 0;
  for (uint64_t t = 0; t < 20'000 * kMs; t += 100 * kUs) {
    if (t % (10 * kMs) <= 1000 * kUs)  // 11 per 10 ms
      (void)s.enqueue(0, tpkt(1, ++seq), 1000, t, 1, 1, ect);
    if (light_tenant && t % (10 * kMs) == 0) (void)s.enqueue(0, tpkt(2, ++seq), 1000, t, 2, 2, ect);
    for (const Departure& d : p.at(t)) {
      r.ce_departures += d.ce;
      if (t >= 10'000 * kMs && tenant_of(d) == 1) late.push_back(d.scheduled_tsc);
    }
  }
  r.st = s.class_stats(0);
  r.drops = s.top_tenant_drops(4);
  return r;
}

TEST(SchedulerFairness, AqmKeepsAStandingQueueShortWhereAFifoGrows) {
  // Without AQM the queue grows by 100 packets a second: 1 s and more of sojourn by the end.
  const AqmRun plain = run_aqm(config::Fairness::kNone, false, false, false, false);
  EXPECT_GE(plain.st.queue_len, 1900u);
  EXPECT_EQ(plain.st.drop_aqm, 0u);
  for (config::Fairness f : {config::Fairness::kNone, config::Fairness::kTenant}) {
    const AqmRun r = run_aqm(f, false, false, false);
    // CoDel drops about the excess (2,000 of 22,000 offered), not the queue's fill.
    EXPECT_GT(r.st.drop_aqm, 1000u);
    EXPECT_LT(r.st.drop_aqm, 3000u);
    EXPECT_LT(r.st.queue_len, 200u);  // under 200 ms of backlog at the end
    EXPECT_EQ(r.st.drop_depth, 0u);
    EXPECT_EQ(r.st.enq_packets, r.st.tx_packets + r.st.drop_aqm + r.st.queue_len);
  }
}

TEST(SchedulerFairness, AqmDropsOnlyTheTenantWhoseQueueStands) {
  const AqmRun r = run_aqm(config::Fairness::kTenant, false, false, true);
  ASSERT_FALSE(r.drops.empty());
  EXPECT_EQ(r.drops[0].tenant, 1u);
  EXPECT_GT(r.drops[0].aqm, 1000u);
  for (const TenantDrops& d : r.drops) EXPECT_NE(d.tenant, 2u);
}

TEST(SchedulerFairness, EcnCapablePacketsAreMarkedNotDropped) {
  const AqmRun marked = run_aqm(config::Fairness::kTenant, true, true, false);
  EXPECT_EQ(marked.st.drop_aqm, 0u);
  EXPECT_GT(marked.st.ecn_marked, 10u);
  EXPECT_EQ(marked.ce_departures, marked.st.ecn_marked);
  // ecn: true, but the packets are not ECN capable: dropped.
  const AqmRun not_ect = run_aqm(config::Fairness::kTenant, true, false, false);
  EXPECT_GT(not_ect.st.drop_aqm, 1000u);
  EXPECT_EQ(not_ect.st.ecn_marked, 0u);
  // ECN capable, but the class does not mark: dropped.
  const AqmRun no_ecn = run_aqm(config::Fairness::kTenant, false, true, false);
  EXPECT_EQ(no_ecn.st.ecn_marked, 0u);
  EXPECT_GT(no_ecn.st.drop_aqm, 1000u);
}

TEST(SchedulerFairness, AReloadGrowsAFairPoolKeepingEveryPacketAndChangesPriority) {
  config::Class a = fair_class("a", config::Fairness::kTenant, 4), b = fair_class("b");
  Scheduler s(make_drip(1000), {a, b}, kHz);
  for (uint64_t i = 1; i <= 4; ++i)
    ASSERT_TRUE(s.enqueue(0, tpkt(i % 2 + 1, i), 100, 0, i % 2 + 1));
  EXPECT_FALSE(s.enqueue(0, tpkt(1, 99), 100, 0, 1));
  a.queue_depth = 100;
  b.priority = 0;
  a.priority = 1;
  SchedulerReconfig r;
  ASSERT_TRUE(s.prepare(make_drip(1000), {a, b}, &r).empty());
  EXPECT_EQ(r.pools[0].pool_size(), 100u);
  s.apply(r, 0);
  for (uint64_t i = 5; i <= 100; ++i) ASSERT_TRUE(s.enqueue(0, tpkt(1, i), 100, 0, 1)) << i;
  ASSERT_TRUE(s.enqueue(1, tpkt(3, 1), 100, 0, 3));
  Poller p{s};
  p.until(kNever - 1);
  ASSERT_EQ(p.sent.size(), 101u);
  EXPECT_EQ(p.sent[0].cls, 1u);  // b is now the higher priority
  // A change of fairness needs a restart.
  a.fairness = config::Fairness::kNone;
  SchedulerReconfig bad;
  const std::vector<std::string> errors = s.prepare(make_drip(1000), {a, b}, &bad);
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_NE(errors[0].find("classes.a.fairness"), std::string::npos);
}

}  // namespace
}  // namespace dripgate::dataplane
