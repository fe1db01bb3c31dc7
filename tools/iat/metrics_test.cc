// serve's figures from counters and ticks given by hand: the burst windows over the sliding
// period (a burst shows for one period, then goes), and the Prometheus text of the counters
// (exact histogram buckets from the probe's, HELP and TYPE, the window labels).
#include "tools/iat/metrics.h"

#include <gtest/gtest.h>

#include "common/prom_text.h"
#include "common/prom_writer.h"

namespace dripgate::iat {
namespace {

constexpr uint64_t kS = 1'000'000'000;

double value(const std::string& body, const std::string& selector) {
  auto sel = common::parse_prom_selector(selector);
  EXPECT_TRUE(sel) << selector;
  if (!sel) return -1;
  auto r = common::read_prom_metric(body, *sel, common::PromAggregate::kSum);
  EXPECT_EQ(r.status, common::PromReading::Status::kOk) << selector << ": " << r.error;
  EXPECT_EQ(r.series, 1u) << selector;
  return r.value;
}

TEST(BurstTracker, PeakAndFactorOverTheSlidingPeriod) {
  BurstTracker t({100'000, 1'000'000, 10'000'000}, 3 * kS);
  EXPECT_EQ(t.windows()[0].peak, 0u);  // no period yet
  t.tick(0, 0, {0, 0, 0});
  t.tick(1 * kS, 1000, {50, 60, 200});  // a burst of 50 in 100 us during the first second
  t.tick(2 * kS, 2000, {1, 2, 20});
  auto w = t.windows();
  ASSERT_EQ(w.size(), 3u);
  EXPECT_EQ(w[0].peak, 50u);
  EXPECT_EQ(w[2].peak, 200u);
  // 2000 packets in 2 s: 0.1 per 100 us window on average, so 50 is 500 times the mean.
  EXPECT_DOUBLE_EQ(w[0].burst_factor, 500.0);
  EXPECT_DOUBLE_EQ(w[2].burst_factor, 20.0);
  t.tick(3 * kS, 3000, {1, 1, 10});
  EXPECT_EQ(t.windows()[0].peak, 50u) << "the burst is 2 s old, within the 3 s period";
  t.tick(4 * kS, 4000, {2, 2, 10});
  t.tick(5 * kS, 4000, {0, 0, 0});
  w = t.windows();
  EXPECT_EQ(w[0].peak, 2u) << "the burst's second has left the period";
  // 2000 packets in the last 3 s, 2 in one 100 us window.
  EXPECT_DOUBLE_EQ(w[0].burst_factor, 2.0 * 3 * kS / (2000.0 * 100'000));
  t.tick(8 * kS, 4000, {0, 0, 0});
  EXPECT_EQ(t.windows()[0].burst_factor, 0.0) << "no packet in the period";
}

TEST(IatMetrics, CountersHistogramAndWindows) {
  ebpf::Counters c;
  c.totals.packets = 7;
  c.totals.bytes = 700;
  c.totals.first_ns = 1'000;
  c.totals.last_ns = 1'000 + 3'000'000'000ull;
  c.hist[iat_bucket(500)] = 2;            // below the first bound (1.024 us)
  c.hist[iat_bucket(1'024)] = 1;          // exactly on it: counts above it
  c.hist[iat_bucket(3'000)] = 2;          // 3 us
  c.hist[iat_bucket(2'999'990'000)] = 1;  // ~3 s
  c.windows[0].width_ns = 100'000;
  c.windows[1].width_ns = 1'000'000;
  c.windows[2].width_ns = 10'000'000;
  BurstTracker t({100'000, 1'000'000, 10'000'000}, 10 * kS);
  t.tick(0, 0, {0, 0, 0});
  t.tick(kS, 7, {3, 4, 7});
  const std::string body = render_iat_metrics(c, t, "eth\"1");
  const std::string at = "{iface=\"eth\\\"1\"}";
  EXPECT_EQ(value(body, "dripgate_iat_packets_total" + at), 7);
  EXPECT_EQ(value(body, "dripgate_iat_bytes_total" + at), 700);
  const std::string h = "dripgate_iat_interarrival_seconds";
  auto bucket = [&](const std::string& le) {
    return value(body, h + "_bucket{iface=\"eth\\\"1\",le=\"" + le + "\"}");
  };
  EXPECT_EQ(bucket("1.024e-06"), 2);
  EXPECT_EQ(bucket("1.28e-06"), 3);
  EXPECT_EQ(bucket("3.072e-06"), 5);
  EXPECT_EQ(bucket("2.147483648"), 5);
  EXPECT_EQ(bucket("3.221225472"), 6);
  EXPECT_EQ(bucket("+Inf"), 6);
  EXPECT_EQ(value(body, h + "_count" + at), 6);
  EXPECT_DOUBLE_EQ(value(body, h + "_sum" + at), 3.0);
  EXPECT_EQ(value(body, "dripgate_iat_window_peak_packets{window=\"100us\"}"), 3);
  EXPECT_EQ(value(body, "dripgate_iat_window_peak_packets{window=\"10ms\"}"), 7);
  EXPECT_DOUBLE_EQ(value(body, "dripgate_iat_burst_factor{window=\"1ms\"}"), 4.0 * kS / (7 * 1e6));
  for (const char* f :
       {"dripgate_iat_packets_total counter", "dripgate_iat_interarrival_seconds histogram",
        "dripgate_iat_window_peak_packets gauge", "dripgate_iat_burst_factor gauge"})
    EXPECT_NE(body.find(std::string("# TYPE ") + f + "\n"), std::string::npos) << f;
  // Cumulative, bound after bound.
  double last = 0;
  for (uint64_t b : interarrival_bounds_ns()) {
    const double v = bucket(common::PromWriter::number(static_cast<double>(b) / 1e9));
    EXPECT_LE(last, v) << b;
    last = v;
  }
}

}  // namespace
}  // namespace dripgate::iat
