// Shadow mode and the service-wide brake end to end: real dripgate-control daemons sharing one
// redis-server, over HTTP (/v1/admit, POST/GET/DELETE /v1/admin/brake, /healthz, /metrics).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "tests/admit_load.h"
#include "tests/control_daemon.h"
#include "tests/http_client.h"
#include "tests/redis_server.h"

namespace {

using dripgate::testing::AdmitLoad;
using dripgate::testing::ControlDaemon;
using dripgate::testing::http;
using dripgate::testing::HttpResponse;
using dripgate::testing::RedisServer;
using namespace std::chrono_literals;

const std::vector<std::string> kAdmin = {"Authorization: Bearer adm1n"};

// Plan `p` (tenants a, b, c...) with a tenant bucket; plan `gold` (tenant g) alike, to exempt.
std::string config(int redis_port, double capacity, double refill, bool admin = true) {
  const std::string bucket = "{ capacity: " + std::to_string(capacity) +
                             ", refill_per_s: " + std::to_string(refill) + " }";
  return "redis: { url: \"redis://127.0.0.1:" + std::to_string(redis_port) +
         "\", timeout_ms: 2000 }\n" + "control: { threads: 1" +
         (admin ? ", admin_token: \"adm1n\"" : "") + " }\n" +
         "plans:\n  p: { gates: { tenant: " + bucket +
         " } }\n  gold: { gates: { tenant: " + bucket + " } }\n" +
         "tenants:\n  \"*\": { plan: p }\n  g: { plan: gold }\n";
}

HttpResponse post_brake(int port, const std::string& body,
                        const std::vector<std::string>& auth = kAdmin) {
  return http(port, "POST", "/v1/admin/brake", body, auth);
}

int admitted(int port, const std::string& tenant, int n) {
  int ok = 0;
  for (int i = 0; i < n; ++i)
    ok += http(port, "POST", "/v1/admit", R"({"tenant":")" + tenant + "\"}").status == 200;
  return ok;
}

// Waits (polling /healthz) until the daemon's brake is `on`; false after 3 s.
bool brake_seen(int port, bool on) {
  for (auto end = std::chrono::steady_clock::now() + 3s; std::chrono::steady_clock::now() < end;
       std::this_thread::sleep_for(20ms))
    if (http(port, "GET", "/healthz").body_json().contains("brake") == on) return true;
  return false;
}

// A shadow bucket of 3 through the HTTP API: the 4th and 5th requests are admitted with
// shadow_refused and the Dripgate-Shadow-Refused header, and the metrics count them apart, with
// the gate.
TEST(Shadow, AdmitsAndCountsWhatItWouldHaveRefused) {
  RedisServer redis;
  const std::string yaml =
      "redis: { url: \"redis://127.0.0.1:" + std::to_string(redis.port()) +
      "\", timeout_ms: 2000 }\ncontrol: { threads: 1 }\n"
      "plans:\n  trial: { gates: { tenant: { capacity: 3, refill_per_s: 0.001, mode: shadow } } }\n"
      "tenants:\n  t: { plan: trial }\n";
  ControlDaemon d(DRIPGATE_CONTROL_BIN, yaml);
  ASSERT_TRUE(d.ready()) << d.log();
  for (int i = 1; i <= 5; ++i) {
    HttpResponse r = http(d.port(), "POST", "/v1/admit", R"({"tenant":"t"})");
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.body_json().value("shadow_refused", ""), i <= 3 ? "" : "tenant") << r.body;
    EXPECT_EQ(r.header("dripgate-shadow-refused"), i <= 3 ? "<absent>" : "tenant");
  }
  const std::string metrics = http(d.port(), "GET", "/metrics").body;
  EXPECT_NE(metrics.find("dripgate_admissions_total{tenant=\"t\",gate=\"tenant\",result=\"shadow_"
                         "refused\",front=\"http\"} 2\n"),
            std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("dripgate_admissions_total{tenant=\"t\",gate=\"\",result=\"allowed\","
                         "front=\"http\"} 3\n"),
            std::string::npos)
      << metrics;
}

TEST(Brake, AdminTokenAndValidation) {
  RedisServer redis;
  ControlDaemon off(DRIPGATE_CONTROL_BIN, config(redis.port(), 10, 1, false));
  ASSERT_TRUE(off.ready()) << off.log();
  EXPECT_EQ(post_brake(off.port(), R"({"factor":0.5,"ttl_s":60})").status, 404);
  ControlDaemon d(DRIPGATE_CONTROL_BIN, config(redis.port(), 10, 1));
  ASSERT_TRUE(d.ready()) << d.log();
  EXPECT_EQ(post_brake(d.port(), R"({"factor":0.5,"ttl_s":60})", {}).status, 401);
  EXPECT_EQ(http(d.port(), "DELETE", "/v1/admin/brake").status, 401);
  EXPECT_EQ(http(d.port(), "GET", "/v1/admin/brake").status, 401);
  struct Bad {
    std::string body, field;
  };
  for (const Bad& b : std::vector<Bad>{
           {R"({"factor":1.5,"ttl_s":60})", "factor"},
           {R"({"factor":-0.1,"ttl_s":60})", "factor"},
           {R"({"factor":"half","ttl_s":60})", "factor"},
           {R"({"ttl_s":60})", "factor"},
           {R"({"factor":0.5})", "ttl_s"},
           {R"({"factor":0.5,"ttl_s":0})", "ttl_s"},
           {R"({"factor":0.5,"ttl_s":1.5})", "ttl_s"},
           {R"({"factor":0.5,"ttl_s":86401})", "ttl_s"},
           {R"({"factor":0.5,"ttl_s":60,"exempt_plans":"gold"})", "exempt_plans"},
           {R"({"factor":0.5,"ttl_s":60,"exempt_plans":["gold","nope"]})", "exempt_plans"},
           {R"({"factor":0.5,"ttl_s":60,"exempt_plans":[7]})", "exempt_plans[0]"},
           {R"({"factor":0.5,"ttl_s":60,"speed":1})", "speed"},
       }) {
    SCOPED_TRACE(b.body);
    HttpResponse r = post_brake(d.port(), b.body);
    EXPECT_EQ(r.status, 400);
    EXPECT_EQ(r.body_json().value("error", "").rfind(b.field + ": ", 0), 0u) << r.body;
  }
  // Nothing was set by any of them.
  EXPECT_TRUE(http(d.port(), "GET", "/v1/admin/brake", "", kAdmin).body_json()["brake"].is_null());

  HttpResponse set = post_brake(d.port(), R"({"factor":0.5,"ttl_s":60,"exempt_plans":["gold"]})");
  ASSERT_EQ(set.status, 200) << set.body;
  HttpResponse got = http(d.port(), "GET", "/v1/admin/brake", "", kAdmin);
  ASSERT_EQ(got.status, 200);
  EXPECT_EQ(got.body_json()["brake"]["factor"], 0.5);
  EXPECT_EQ(got.body_json()["brake"]["exempt_plans"], nlohmann::json::array({"gold"}));
  EXPECT_GT(got.body_json()["brake"]["ttl_s"].get<int>(), 50);
  ASSERT_TRUE(brake_seen(d.port(), true));
  EXPECT_NE(http(d.port(), "GET", "/metrics").body.find("dripgate_brake_factor 0.5\n"),
            std::string::npos);
  HttpResponse braked = http(d.port(), "POST", "/v1/admit", R"({"tenant":"a"})");
  EXPECT_EQ(braked.header("dripgate-brake"), "0.5");
  EXPECT_EQ(http(d.port(), "POST", "/v1/admit", R"({"tenant":"g"})").header("dripgate-brake"),
            "<absent>");
  EXPECT_EQ(http(d.port(), "DELETE", "/v1/admin/brake", "", kAdmin).status, 200);
  EXPECT_TRUE(http(d.port(), "GET", "/v1/admin/brake", "", kAdmin).body_json()["brake"].is_null());
  ASSERT_TRUE(brake_seen(d.port(), false));
  EXPECT_NE(http(d.port(), "GET", "/metrics").body.find("dripgate_brake_factor 1\n"),
            std::string::npos);
}

// The key's expiry lifts the brake by itself, on every daemon.
TEST(Brake, TtlLiftsIt) {
  RedisServer redis;
  ControlDaemon d(DRIPGATE_CONTROL_BIN, config(redis.port(), 10, 1));
  ASSERT_TRUE(d.ready()) << d.log();
  ASSERT_EQ(post_brake(d.port(), R"({"factor":0.2,"ttl_s":1})").status, 200);
  ASSERT_TRUE(brake_seen(d.port(), true));
  std::this_thread::sleep_for(1s);
  EXPECT_TRUE(brake_seen(d.port(), false));
  EXPECT_TRUE(http(d.port(), "GET", "/v1/admin/brake", "", kAdmin).body_json()["brake"].is_null());
}

// A brake set on one daemon holds a daemon started afterwards from its first request, and an
// exempt plan keeps its full rates.
TEST(Brake, LaterDaemonObeysAndExemptPlanIsNotBraked) {
  RedisServer redis;
  ControlDaemon first(DRIPGATE_CONTROL_BIN, config(redis.port(), 10, 0.001));
  ASSERT_TRUE(first.ready()) << first.log();
  ASSERT_EQ(
      post_brake(first.port(), R"({"factor":0.5,"ttl_s":120,"exempt_plans":["gold"]})").status,
      200);
  ControlDaemon later(DRIPGATE_CONTROL_BIN, config(redis.port(), 10, 0.001));
  ASSERT_TRUE(later.ready()) << later.log();
  EXPECT_EQ(admitted(later.port(), "fresh", 12), 5);  // capacity 10 braked to 5
  EXPECT_EQ(admitted(later.port(), "g", 12), 10);     // exempt: the whole capacity
}

// The brake halves admitted throughput within a second on two daemons at once: clients on both
// hammer one bucket-limited tenant (the refill binds), the brake is posted to one daemon only.
TEST(Brake, HalvesThroughputOnTwoDaemonsWithinASecond) {
  constexpr double kRefill = 100;
  RedisServer redis;
  ControlDaemon a(DRIPGATE_CONTROL_BIN, config(redis.port(), 10, kRefill));
  ControlDaemon b(DRIPGATE_CONTROL_BIN, config(redis.port(), 10, kRefill));
  ASSERT_TRUE(a.ready()) << a.log();
  ASSERT_TRUE(b.ready()) << b.log();
  AdmitLoad load({b.port(), a.port()}, R"({"tenant":"hot"})", 8);
  std::this_thread::sleep_for(1s);  // past the initial burst
  const double before = load.rate(2s);
  const int answered_before = load.answered();
  ASSERT_EQ(post_brake(a.port(), R"({"factor":0.5,"ttl_s":60})").status, 200);
  std::this_thread::sleep_for(1s);  // within one second both daemons have it
  const double after = load.rate(2s);
  const int demand = load.answered() - answered_before;
  load.stop();
  std::printf("brake: admitted %.1f/s before, %.1f/s after factor 0.5 (%d answers meanwhile)\n",
              before, after, demand);
  // The clients ask for more than the bucket gives, so the refill binds before and after.
  ASSERT_GT(demand, 3 * kRefill);
  EXPECT_GT(before, 0.8 * kRefill);
  EXPECT_LT(before, 1.2 * kRefill);
  EXPECT_GT(after, 0.35 * before);
  EXPECT_LT(after, 0.65 * before);
}

}  // namespace
