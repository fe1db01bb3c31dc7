// The dataplane's /metrics text from a scheduler and counters set by hand: every family has its
// HELP and TYPE, each series says what the stats say, the lateness histogram is cumulative and
// ends at its count, and a class name or tenant that needs escaping is escaped.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <sstream>

#include "common/prom_text.h"
#include "config/test_class.h"
#include "dataplane/prom_render.h"
#include "dataplane/scheduler.h"
#include "dataplane/stats.h"

namespace dripgate::dataplane {
namespace {

constexpr uint64_t kHz = 1'000'000'000;  // 1 tick = 1 ns

double value(const std::string& body, const std::string& selector) {
  std::string why;
  auto sel = common::parse_prom_selector(selector, &why);
  EXPECT_TRUE(sel) << selector << ": " << why;
  if (!sel) return -1;
  common::PromReading r = common::read_prom_metric(body, *sel, common::PromAggregate::kSum);
  EXPECT_EQ(r.status, common::PromReading::Status::kOk) << selector << ": " << r.error;
  EXPECT_EQ(r.series, 1u) << selector;
  return r.value;
}

struct Fixture {
  config::Dataplane dp;
  std::unique_ptr<Scheduler> sched;
  std::unique_ptr<Stats> stats;
  Fixture() {
    dp.drip.rate_pps = 1000;
    dp.classes = {config::test_class("gold", 4, 500, 8000, 3, 0),
                  config::test_class("default", 1, 0, 0, 64, 0)};
    sched = std::make_unique<Scheduler>(dp.drip, dp.classes, kHz);
    stats = std::make_unique<Stats>(sched.get(), std::vector<std::string>{"", "truncated"}, kHz, 0);
  }
};

TEST(PromRender, EverySeriesSaysWhatTheStatsSay) {
  Fixture f;
  Scheduler& s = *f.sched;
  Stats& st = *f.stats;
  int pkt = 0;
  // gold: 5 arrivals into a queue of 3 (2 depth drops), tenant 7; one leaves.
  for (int i = 0; i < 5; ++i) (void)s.enqueue(0, &pkt, 100, 0, 7);
  Departure out[4];
  Item expired[4];
  unsigned n_exp = 0;
  ASSERT_EQ(s.poll(0, out, 1, expired, 4, &n_exp), 1u);
  st.classes[0].tx_pkts.add(1);
  st.classes[0].tx_bytes.add(100);
  st.classes[0].late_ticks.set(2500);  // left 2.5 us after its slot
  st.classes[1].tx_pkts.add(9);
  st.classes[1].drop_tx.add(2);
  st.classes[1].late_ticks.set(uint64_t(-300));  // early, and nothing queued: 0 behind
  st.rx[0].rx_client.add(40);
  st.rx[0].rx_cluster.add(6);
  st.rx[0].reverse_tx.add(5);
  st.rx[0].reverse_drop_tx.add(1);
  st.rx[0].malformed[1].add(3);
  st.rx[0].drop_unknown.add(4);
  st.drip.pass_tx.add(8);
  st.tags.ok.add(11);
  st.tags.full.add(1);
  st.tags.invalid.add(2);
  st.tenant_name = [](uint32_t id) { return id == 7 ? std::string("ac\"me") : std::string(); };
  const std::string body = render_metrics(st, {&f.dp, 12, 1024});

  EXPECT_EQ(value(body, "dripgate_dataplane_received_packets_total{port=\"client\"}"), 40);
  EXPECT_EQ(value(body, "dripgate_dataplane_received_packets_total{port=\"cluster\"}"), 6);
  EXPECT_EQ(value(body, "dripgate_dataplane_sent_packets_total{class=\"gold\",port=\"cluster\"}"),
            1);
  EXPECT_EQ(value(body, "dripgate_dataplane_sent_packets_total{class=\"default\"}"), 9);
  EXPECT_EQ(value(body, "dripgate_dataplane_sent_bytes_total{class=\"gold\",port=\"cluster\"}"),
            100);
  EXPECT_EQ(value(body, "dripgate_dataplane_queue_depth_packets{class=\"gold\"}"), 2);
  EXPECT_EQ(value(body, "dripgate_dataplane_queue_limit_packets{class=\"gold\"}"), 3);
  EXPECT_EQ(value(body, "dripgate_dataplane_queue_limit_packets{class=\"default\"}"), 64);
  EXPECT_EQ(value(body, "dripgate_dataplane_drops_total{class=\"gold\",cause=\"depth\"}"), 2);
  EXPECT_EQ(value(body, "dripgate_dataplane_drops_total{class=\"default\",cause=\"tx\"}"), 2);
  EXPECT_EQ(value(body, "dripgate_dataplane_drops_total{cause=\"malformed\"}"), 3);
  EXPECT_EQ(value(body, "dripgate_dataplane_drops_total{cause=\"unknown\"}"), 4);
  EXPECT_EQ(value(body, "dripgate_dataplane_drops_total{cause=\"tx\",port=\"client\"}"), 1);
  EXPECT_EQ(value(body, "dripgate_dataplane_tenant_drops_total{tenant=\"ac\\\"me\"}"), 2);
  EXPECT_NE(body.find("tenant=\"ac\\\"me\""), std::string::npos) << body;
  EXPECT_EQ(value(body, "dripgate_dataplane_drip_configured_packets_per_second{class=\"gold\"}"),
            500);
  EXPECT_EQ(value(body, "dripgate_dataplane_drip_configured_bytes_per_second{class=\"gold\"}"),
            1000);
  EXPECT_EQ(value(body, "dripgate_dataplane_drip_configured_packets_per_second{port=\"cluster\"}"),
            1000);
  EXPECT_DOUBLE_EQ(value(body, "dripgate_dataplane_drip_behind_seconds{class=\"gold\"}"), 2.5e-6);
  EXPECT_EQ(value(body, "dripgate_dataplane_drip_behind_seconds{class=\"default\"}"), 0);
  EXPECT_EQ(value(body, "dripgate_dataplane_tags_total{result=\"ok\"}"), 11);
  EXPECT_EQ(value(body, "dripgate_dataplane_tags_total{result=\"full\"}"), 1);
  EXPECT_EQ(value(body, "dripgate_dataplane_tags_total{result=\"invalid\"}"), 2);
  EXPECT_EQ(value(body, "dripgate_dataplane_flows"), 12);
  EXPECT_EQ(value(body, "dripgate_dataplane_flow_table_capacity"), 1024);

  // Every sample's family is declared, once, with HELP and TYPE before its samples.
  std::map<std::string, std::string> types;
  std::istringstream lines(body);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("# HELP ", 0) == 0) continue;
    if (line.rfind("# TYPE ", 0) == 0) {
      std::istringstream t(line.substr(7));
      std::string name, type;
      t >> name >> type;
      EXPECT_TRUE(types.emplace(name, type).second) << "declared twice: " << name;
      EXPECT_NE(body.find("# HELP " + name + " "), std::string::npos) << name;
      continue;
    }
    std::string name = line.substr(0, line.find_first_of("{ "));
    for (const char* suffix : {"_bucket", "_sum", "_count"})
      if (!types.count(name) && name.size() > std::strlen(suffix) && name.ends_with(suffix))
        name.resize(name.size() - std::strlen(suffix));
    EXPECT_TRUE(types.count(name)) << "no TYPE before " << line;
  }
  EXPECT_EQ(types["dripgate_dataplane_departure_lateness_seconds"], "histogram");
  EXPECT_EQ(types["dripgate_dataplane_drops_total"], "counter");
  EXPECT_EQ(types["dripgate_dataplane_queue_depth_packets"], "gauge");
}

TEST(PromRender, LatenessHistogramIsCumulativeAndEndsAtItsCount) {
  Fixture f;
  LatencyHist& h = f.stats->drip.error;
  h.record_ns_n(-500, 2);       // early: at or below -1e-7, not -1e-6
  h.record_ns_n(0, 3);          // on time
  h.record_ns_n(100, 4);        // exactly the 1e-7 bound
  h.record_ns_n(101, 1);        // just above it
  h.record_ns_n(3000, 5);       // 3 us
  h.record_ns_n(2'000'000, 1);  // 2 ms
  const std::string body = render_metrics(*f.stats, {&f.dp, 0, 1});
  const std::string n = "dripgate_dataplane_departure_lateness_seconds";
  auto bucket = [&](const char* le) { return value(body, n + "_bucket{le=\"" + le + "\"}"); };
  EXPECT_EQ(bucket("-1e-06"), 0);
  EXPECT_EQ(bucket("-1e-07"), 2);
  EXPECT_EQ(bucket("0"), 5);
  EXPECT_EQ(bucket("1e-07"), 9);
  EXPECT_EQ(bucket("2.5e-07"), 10);
  EXPECT_EQ(bucket("2.5e-06"), 10);
  EXPECT_EQ(bucket("5e-06"), 15);
  EXPECT_EQ(bucket("0.001"), 15);
  EXPECT_EQ(bucket("0.0025"), 16);
  EXPECT_EQ(bucket("+Inf"), 16);
  EXPECT_EQ(value(body, n + "_count"), 16);
  EXPECT_NEAR(value(body, n + "_sum"), (-1000 + 400 + 101 + 15000 + 2'000'000) / 1e9, 1e-15);
  // Cumulative: never decreasing, bound after bound.
  const std::vector<uint64_t> c = cumulative_at(h.snapshot(), lateness_bounds());
  for (size_t i = 1; i < c.size(); ++i) EXPECT_LE(c[i - 1], c[i]) << i;
}

}  // namespace
}  // namespace dripgate::dataplane
