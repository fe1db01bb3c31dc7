// A model gate following its backends' saturation end to end: a real dripgate-control on a
// real redis-server, its model gate's saturation scraping a metrics endpoint this test serves
// (tests/metrics_server.h). Clients hammer the model gate; when the served signal goes above
// the target the admitted rate falls to the floor's, and it recovers when the signal drops.
// Each phase is measured once the published share (/metrics) shows the change, with tolerant
// bounds.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

#include "tests/admit_load.h"
#include "tests/control_daemon.h"
#include "tests/http_client.h"
#include "tests/metrics_server.h"
#include "tests/redis_server.h"

namespace {

using dripgate::testing::AdmitLoad;
using dripgate::testing::ControlDaemon;
using dripgate::testing::http;
using dripgate::testing::MetricsServer;
using dripgate::testing::RedisServer;
using namespace std::chrono_literals;

constexpr double kRefill = 100;

std::string page(int waiting) {
  return "# TYPE vllm:num_requests_waiting gauge\n"
         "vllm:num_requests_waiting{engine=\"0\",model_name=\"llama\"} " +
         std::to_string(waiting) + "\nvllm:num_requests_waiting{model_name=\"other\"} 99\n";
}

// Waits up to 5 s for the daemon's /metrics to show the model gate's share at `share`.
bool share_is(int port, const std::string& share) {
  const std::string line =
      "dripgate_saturation_share{gate=\"model\",model=\"llama\"} " + share + "\n";
  for (auto end = std::chrono::steady_clock::now() + 5s; std::chrono::steady_clock::now() < end;
       std::this_thread::sleep_for(20ms))
    if (http(port, "GET", "/metrics").body.find(line) != std::string::npos) return true;
  return false;
}

TEST(Saturation, TheModelGateFollowsItsBackendsSignal) {
  RedisServer redis;
  MetricsServer backend;
  backend.set_body(page(2));
  const std::string yaml =
      "redis: { url: \"redis://127.0.0.1:" + std::to_string(redis.port()) +
      "\", timeout_ms: 2000 }\ncontrol: { threads: 1 }\n"
      "plans:\n  p: { gates: { tenant: { capacity: 100000, refill_per_s: 100000 } } }\n"
      "tenants:\n  \"*\": { plan: p }\n"
      "global_gates:\n  model:\n    llama:\n      capacity: 10\n      refill_per_s: 100\n"
      "      saturation: { url: \"" +
      backend.url() +
      "\", metric: 'vllm:num_requests_waiting{model_name=\"llama\"}', target: 8, "
      "min_share: 0.2, increase: 0.4, decrease: 0.5, interval_ms: 100 }\n";
  ControlDaemon d(DRIPGATE_CONTROL_BIN, yaml);
  ASSERT_TRUE(d.ready()) << d.log();
  AdmitLoad load({d.port()}, R"({"tenant":"x","model":"llama"})", 4);
  ASSERT_TRUE(share_is(d.port(), "1"));
  std::this_thread::sleep_for(300ms);  // past the initial burst
  const double before = load.rate(1200ms);
  backend.set_body(page(20));  // above the target: 1, 0.5, 0.25, 0.2 (the floor)
  const bool held = share_is(d.port(), "0.2");
  const double saturated = load.rate(1200ms);
  backend.set_body(page(2));  // below it again: 0.6, 1
  const bool recovered = share_is(d.port(), "1");
  std::this_thread::sleep_for(200ms);
  const double after = load.rate(1200ms);
  const int demand = load.answered();
  load.stop();
  std::printf("saturation: admitted %.1f/s, %.1f/s at share 0.2, %.1f/s after (%d answers)\n",
              before, saturated, after, demand);
  ASSERT_TRUE(held) << d.log();
  ASSERT_TRUE(recovered) << d.log();
  ASSERT_GT(demand, 6 * kRefill);  // the clients ask for more than the gate gives
  EXPECT_GT(before, 0.8 * kRefill);
  EXPECT_LT(before, 1.2 * kRefill);
  EXPECT_GT(saturated, 0.1 * kRefill);  // the floor's 20/s, give or take
  EXPECT_LT(saturated, 0.35 * kRefill);
  EXPECT_GT(after, 0.8 * kRefill);
  const std::string metrics = http(d.port(), "GET", "/metrics").body;
  EXPECT_NE(metrics.find("dripgate_saturation_signal{gate=\"model\",model=\"llama\"} 2\n"),
            std::string::npos)
      << metrics;
  EXPECT_NE(d.log().find("saturation: model gate 'llama' held back"), std::string::npos);
  EXPECT_NE(d.log().find("saturation: model gate 'llama' back at its configured rate"),
            std::string::npos);
}

}  // namespace
