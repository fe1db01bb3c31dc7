// The status page's readings of the dataplane and the receiver: their metrics pages read into
// per-class and per-interface figures (rates between two readings), and the scraper fetching
// them from endpoints the test serves (tests/metrics_server.h) once the page is watched.
#include "control/registry/status_scrape.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <thread>

#include "tests/metrics_server.h"

namespace dripgate::control {
namespace {

using testing::MetricsServer;

std::string dataplane_page(int sent_bytes, int ttl_drops) {
  return "# TYPE dripgate_dataplane_sent_bytes_total counter\n"
         "dripgate_dataplane_sent_bytes_total{class=\"gold\",port=\"0\"} " +
         std::to_string(sent_bytes) +
         "\n"
         "dripgate_dataplane_sent_bytes_total{class=\"gold\",port=\"1\"} 1000\n"
         "dripgate_dataplane_sent_packets_total{class=\"gold\",port=\"0\"} 10\n"
         "dripgate_dataplane_drip_configured_bytes_per_second{class=\"gold\"} 125000\n"
         "dripgate_dataplane_queue_depth_packets{class=\"gold\"} 12\n"
         "dripgate_dataplane_queue_limit_packets{class=\"gold\"} 1024\n"
         "dripgate_dataplane_drops_total{class=\"gold\",cause=\"ttl\"} " +
         std::to_string(ttl_drops) +
         "\n"
         "dripgate_dataplane_drops_total{class=\"default\",cause=\"depth\"} 3\n"
         "dripgate_dataplane_drops_total{cause=\"malformed\"} 2\n"
         "dripgate_dataplane_drip_configured_bytes_per_second{port=\"cluster\"} 500000\n"
         "dripgate_dataplane_sent_packets_total{port=\"client\"} 77\n"
         "dripgate_dataplane_other{class=\"x\"} 1\n";
}

const ClassStatus* find(const StatusReading& r, std::string_view cls) {
  for (const ClassStatus& c : r.classes)
    if (c.cls == cls) return &c;
  return nullptr;
}

TEST(StatusScrape, ReadsTheDataplanesClassesAndTheirRates) {
  StatusReading first;
  ASSERT_EQ(read_dataplane_metrics(dataplane_page(4000, 1), 10'000, nullptr, first), "");
  first.dataplane.at_ms = 10'000;
  // default (drops only), gold, and the drops without a class; "x" is not ours, the port's own
  // rate and unshaped frames are no class's.
  ASSERT_EQ(first.classes.size(), 3u);
  ASSERT_TRUE(find(first, ""));
  EXPECT_EQ(find(first, "")->drops.at("malformed").total, 2);
  EXPECT_EQ(find(first, "")->sent_packets, 0);
  EXPECT_TRUE(std::isnan(find(first, "")->configured_bytes_per_s));
  const ClassStatus* gold = find(first, "gold");
  ASSERT_TRUE(gold);
  EXPECT_EQ(gold->sent_bytes, 5000);  // both ports
  EXPECT_EQ(gold->sent_packets, 10);
  EXPECT_EQ(gold->configured_bytes_per_s, 125000);
  EXPECT_EQ(gold->queue_depth, 12);
  EXPECT_EQ(gold->queue_limit, 1024);
  EXPECT_TRUE(std::isnan(gold->sent_bytes_per_s));  // one reading: no rate yet
  EXPECT_EQ(gold->drops.at("ttl").total, 1);
  EXPECT_TRUE(std::isnan(find(first, "default")->queue_depth));

  StatusReading second;
  ASSERT_EQ(read_dataplane_metrics(dataplane_page(6000, 5), 12'000, &first, second), "");
  second.dataplane.at_ms = 12'000;  // as the scraper stamps a reading read
  gold = find(second, "gold");
  EXPECT_EQ(gold->sent_bytes_per_s, 1000);  // 2000 bytes in 2 s
  EXPECT_EQ(gold->sent_packets_per_s, 0);
  EXPECT_EQ(gold->drops.at("ttl").per_s, 2);
  // A counter that went back (the dataplane restarted) reads as no traffic, not negative.
  StatusReading third;
  ASSERT_EQ(read_dataplane_metrics(dataplane_page(0, 0), 14'000, &second, third), "");
  EXPECT_EQ(find(third, "gold")->sent_bytes_per_s, 0);
  EXPECT_NE(read_dataplane_metrics("<html>oops</html>\n", 1, nullptr, third), "");
}

TEST(StatusScrape, ReadsTheReceiversHistogramAndBurstFactor) {
  const std::string page =
      "dripgate_iat_interarrival_seconds_bucket{iface=\"cluster0\",le=\"1e-05\"} 2\n"
      "dripgate_iat_interarrival_seconds_bucket{iface=\"cluster0\",le=\"0.0001\"} 7\n"
      "dripgate_iat_interarrival_seconds_bucket{iface=\"cluster0\",le=\"+Inf\"} 10\n"
      "dripgate_iat_interarrival_seconds_count{iface=\"cluster0\"} 10\n"
      "dripgate_iat_burst_factor{iface=\"cluster0\",window=\"10ms\"} 1.5\n";
  StatusReading r;
  ASSERT_EQ(read_iat_metrics(page, nullptr, r), "");
  ASSERT_EQ(r.ifaces.size(), 1u);
  const IatStatus& f = r.ifaces[0];
  EXPECT_EQ(f.iface, "cluster0");
  ASSERT_EQ(f.le.size(), 3u);
  EXPECT_EQ(f.le[0], 1e-05);
  EXPECT_TRUE(std::isinf(f.le[2]));
  EXPECT_EQ(f.counts, (std::vector<double>{2, 5, 3}));
  EXPECT_EQ(f.recent, (std::vector<double>{0, 0, 0}));
  EXPECT_EQ(f.burst_factor.at("10ms"), 1.5);
  StatusReading next;
  std::string later = page;
  later.replace(later.find("} 10\n"), 5, "} 14\n");  // 4 more above 100 us
  ASSERT_EQ(read_iat_metrics(later, &r, next), "");
  EXPECT_EQ(next.ifaces[0].recent, (std::vector<double>{0, 0, 4}));
}

// The probe's hundreds of log-linear bounds: kept to the last one below each power of ten.
TEST(StatusScrape, AFineHistogramIsShownByDecades) {
  std::string page;
  double n = 0;
  for (double le = 1e-6; le < 0.05; le *= 1.25)
    page += "dripgate_iat_interarrival_seconds_bucket{iface=\"c0\",le=\"" + std::to_string(le) +
            "\"} " + std::to_string(n += 1) + "\n";
  page += "dripgate_iat_interarrival_seconds_bucket{iface=\"c0\",le=\"+Inf\"} " +
          std::to_string(n + 5) + "\n";
  StatusReading r;
  ASSERT_EQ(read_iat_metrics(page, nullptr, r), "");
  const IatStatus& f = r.ifaces.at(0);
  // 1 us (the first bound), below 10 us, 100 us, 1 ms, 10 ms, 100 ms; +Inf.
  ASSERT_EQ(f.le.size(), 7u);
  EXPECT_DOUBLE_EQ(f.le[0], 1e-6);
  EXPECT_LE(f.le[1], 1e-5);
  EXPECT_GT(f.le[1], 1e-5 / 1.25);
  EXPECT_TRUE(std::isinf(f.le.back()));
  double total = 0;
  for (double c : f.counts) total += c;
  EXPECT_EQ(total, n + 5);  // nothing lost in the merge
}

// Waits up to 10 s for a reading that pred accepts, asking as the page does.
template <class Pred>
std::shared_ptr<const StatusReading> wait_reading(StatusScrape& s, Pred pred) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < until) {
    auto r = s.watched();
    if (r && pred(*r)) return r;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return nullptr;
}

TEST(StatusScrape, ScrapesOnceWatchedAndSaysWhatFailed) {
  MetricsServer dp, iat;
  dp.set_body(dataplane_page(4000, 1));
  iat.set_body("dripgate_iat_burst_factor{iface=\"c0\",window=\"10ms\"} 2\n");
  config::Config c;
  c.control.status.dataplane_metrics_url = dp.url();
  c.control.status.iat_metrics_url = iat.url("/iat");
  ConfigStore store(c);
  StatusScrape s(store);
  s.start();
  EXPECT_EQ(dp.requests(), 0);  // nobody watched yet
  auto r = wait_reading(s, [](const StatusReading& r) { return r.dataplane.at_ms && r.iat.at_ms; });
  ASSERT_TRUE(r);
  EXPECT_EQ(r->dataplane.url, dp.url());
  EXPECT_EQ(r->dataplane.error, "");
  ASSERT_TRUE(find(*r, "gold"));
  EXPECT_EQ(iat.last_target(), "/iat");
  ASSERT_EQ(r->ifaces.size(), 1u);
  EXPECT_EQ(r->ifaces[0].burst_factor.at("10ms"), 2);
  // A rate once two readings are in.
  dp.set_body(dataplane_page(9000, 1));
  r = wait_reading(s, [](const StatusReading& r) {
    const ClassStatus* g = find(r, "gold");
    return g && g->sent_bytes_per_s > 0;
  });
  ASSERT_TRUE(r);
  // A failing endpoint: the cause, and the last figures kept.
  dp.set_mode(MetricsServer::Mode::kStatus500);
  r = wait_reading(s, [](const StatusReading& r) { return !r.dataplane.error.empty(); });
  ASSERT_TRUE(r);
  EXPECT_EQ(r->dataplane.error, "http: status 500");
  EXPECT_TRUE(find(*r, "gold"));
  dp.set_mode(MetricsServer::Mode::kRaw);
  dp.set_body("HTTP/1.0 200 OK\r\n\r\n<html>not metrics</html>\n");
  r = wait_reading(s,
                   [](const StatusReading& r) { return r.dataplane.error.starts_with("parse"); });
  ASSERT_TRUE(r) << s.watched()->dataplane.error;
  s.stop();
}

}  // namespace
}  // namespace dripgate::control
