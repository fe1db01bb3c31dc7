#include "control/metrics/metrics.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

namespace dripgate::control {
namespace {

TEST(Metrics, CountersRenderWithLabels) {
  Metrics m;
  m.admission("ws-acme", "", "allowed");
  m.admission("ws-acme", "", "allowed");
  m.admission("ws-acme", "tenant", "refused");
  m.http_request(200);
  m.dataplane("tag", "unavailable");
  m.dataplane("untag", "ok");
  m.error("timeout");
  m.up(true);
  std::string text = m.render();
  EXPECT_NE(text.find("# TYPE dripgate_admissions_total counter\n"), std::string::npos);
  EXPECT_NE(text.find("dripgate_admissions_total{tenant=\"ws-acme\",gate=\"\",result=\"allowed\","
                      "front=\"http\"} 2\n"),
            std::string::npos);
  EXPECT_NE(text.find("dripgate_admissions_total{tenant=\"ws-acme\",gate=\"tenant\",result="
                      "\"refused\",front=\"http\"} 1\n"),
            std::string::npos);
  EXPECT_NE(text.find("dripgate_http_requests_total{code=\"200\"} 1\n"), std::string::npos);
  EXPECT_NE(text.find("dripgate_dataplane_tag_total{result=\"unavailable\"} 1\n"),
            std::string::npos);
  EXPECT_NE(text.find("dripgate_dataplane_untag_total{result=\"ok\"} 1\n"), std::string::npos);
  EXPECT_NE(text.find("dripgate_redis_errors_total{kind=\"timeout\"} 1\n"), std::string::npos);
  EXPECT_NE(text.find("dripgate_redis_errors_total{kind=\"auth\"} 0\n"), std::string::npos);
  EXPECT_NE(text.find("dripgate_redis_errors_total{kind=\"late\"} 0\n"), std::string::npos);
  EXPECT_NE(text.find("dripgate_redis_up 1\n"), std::string::npos);
  m.up(false);
  EXPECT_NE(m.render().find("dripgate_redis_up 0\n"), std::string::npos);
}

TEST(Metrics, ConfigReloadsByResultFromZero) {
  Metrics m;
  EXPECT_NE(m.render().find("dripgate_config_reloads_total{result=\"ok\"} 0\n"), std::string::npos);
  EXPECT_NE(m.render().find("dripgate_config_reloads_total{result=\"error\"} 0\n"),
            std::string::npos);
  m.config_reload(true);
  m.config_reload(true);
  m.config_reload(false);
  EXPECT_EQ(m.config_reloads().value({"ok"}), 2u);
  EXPECT_EQ(m.config_reloads().value({"error"}), 1u);
  std::string text = m.render();
  EXPECT_NE(text.find("# TYPE dripgate_config_reloads_total counter\n"), std::string::npos);
  EXPECT_NE(text.find("dripgate_config_reloads_total{result=\"ok\"} 2\n"), std::string::npos);
  EXPECT_NE(text.find("dripgate_config_reloads_total{result=\"error\"} 1\n"), std::string::npos);
}

TEST(Metrics, LabelValuesAreEscaped) {
  CounterFamily f("x_total", "help", {"k"});
  f.inc({"a\"b\\c\nd"});
  std::string out;
  f.render(out);
  EXPECT_NE(out.find("x_total{k=\"a\\\"b\\\\c\\nd\"} 1\n"), std::string::npos) << out;
}

TEST(Metrics, HistogramIsCumulative) {
  Histogram h("rtt_seconds", "help", {0.001, 0.01});
  h.observe(0.0005);
  h.observe(0.001);  // on the bound: le is inclusive
  h.observe(0.005);
  h.observe(2);
  std::string out;
  h.render(out);
  EXPECT_NE(out.find("rtt_seconds_bucket{le=\"0.001\"} 2\n"), std::string::npos) << out;
  EXPECT_NE(out.find("rtt_seconds_bucket{le=\"0.01\"} 3\n"), std::string::npos) << out;
  EXPECT_NE(out.find("rtt_seconds_bucket{le=\"+Inf\"} 4\n"), std::string::npos) << out;
  EXPECT_NE(out.find("rtt_seconds_sum 2.0065\n"), std::string::npos) << out;
  EXPECT_NE(out.find("rtt_seconds_count 4\n"), std::string::npos) << out;
}

TEST(Metrics, ConcurrentIncrementsAreNotLost) {
  Metrics m;
  constexpr int kThreads = 8, kPerThread = 20000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&m, t] {
      for (int i = 0; i < kPerThread; ++i) {
        m.admission("tenant-" + std::to_string(i % 4), "", "allowed");
        m.round_trip(0.0002);
        m.http_request(t % 2 ? 200 : 429);
      }
    });
  }
  for (auto& th : threads) th.join();
  uint64_t total = 0;
  for (int i = 0; i < 4; ++i)
    total += m.admissions().value({"tenant-" + std::to_string(i), "", "allowed", "http"});
  EXPECT_EQ(total, uint64_t{kThreads} * kPerThread);
  EXPECT_EQ(m.redis_round_trip().count(), uint64_t{kThreads} * kPerThread);
  EXPECT_EQ(m.http_requests().value({"200"}) + m.http_requests().value({"429"}),
            uint64_t{kThreads} * kPerThread);
}

}  // namespace
}  // namespace dripgate::control
