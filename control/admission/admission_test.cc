// The admission engine against a real redis-server, driven on a real libevent loop.
//
// The suite runs twice (control/meson.build): against a redis-server of its own per test, and,
// with DRIPGATE_ADMISSION_CLUSTER=1 and the AdmissionTest.* filter, against one 3-master Redis
// Cluster shared by the tests (flushed before each), where the engine routes every call by its
// hash slot and the tests' own Redis commands are routed the same way. The fault tests
// (AdmissionFaultTest: a stopped, paused or killed server) run on the single node only.
#include "control/admission/admission.h"
#include "control/admission/config_snapshot.h"

#include <event2/event.h>
#include <gtest/gtest.h>
#include <hiredis/hiredis.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

#include "control/admission/keys.h"
#include "control/admission/script_calls.h"
#include "control/redis/redis_client.h"
#include "control/redis/slot.h"
#include "control/redis/wall_clock.h"
#include "lua/lua_scripts.h"
#include "tests/admission_test_support.h"
#include "tests/event_loop.h"
#include "tests/redis_cluster.h"
#include "tests/redis_server.h"

namespace dripgate::control {
namespace {

using namespace admission_testing;

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

class AdmissionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cluster()) freeReplyObject(Sync(0).cmd({"FLUSHALL"}));
  }
  testing::RedisServer redis_;
};

// Tests that stop, pause or kill the server: on the test's own redis-server only.
class AdmissionFaultTest : public AdmissionTest {};

// The rate-limit walkthrough (docs/ARCHITECTURE.md), token bucket: capacity 5 @ 1/s, 6 requests,
// a 2 s wait, 2 more.
TEST_F(AdmissionTest, WalkthroughTokenBucketTable) {
  config::Config cfg = base_config(redis_.port());
  config::Plan plan;
  plan.cls = "gold";
  plan.tenant = bucket(5, 1);
  add_tenant(cfg, "ws-acme", plan);
  Harness h(cfg);

  const double expected[] = {4, 3, 2, 1, 0, 0};
  for (int i = 0; i < 6; ++i) {
    AdmitResult r = h.admit(req("ws-acme"));
    SCOPED_TRACE("request " + std::to_string(i + 1));
    if (i < 5) {
      ASSERT_EQ(r.outcome, Outcome::kAllowed) << r.error;
      EXPECT_EQ(r.cls, "gold");
      EXPECT_EQ(r.request_id.rfind("ws-acme.", 0), 0u);
      EXPECT_EQ(r.request_id.size(), std::string("ws-acme.").size() + 16);
    } else {
      ASSERT_EQ(r.outcome, Outcome::kRefused);
      EXPECT_EQ(r.gate, "tenant");
      EXPECT_EQ(r.reason, "rate");
      EXPECT_GT(r.retry_after_ms, 800);
      EXPECT_LE(r.retry_after_ms, 1000);
    }
    EXPECT_NEAR(rem(r, "tenant"), expected[i], 0.1);
    const Remaining* t = find_gate(r, "tenant");
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(t->limit, 5);
    EXPECT_EQ(t->window_s, 5);
    EXPECT_EQ(t->reset_s, static_cast<int64_t>(std::ceil(5 - t->value)));
  }
  std::this_thread::sleep_for(milliseconds(2000));
  const double after[] = {1, 0};
  for (int i = 0; i < 2; ++i) {
    AdmitResult r = h.admit(req("ws-acme"));
    ASSERT_EQ(r.outcome, Outcome::kAllowed) << "request " << 7 + i;
    EXPECT_NEAR(rem(r, "tenant"), after[i], 0.1);
  }
}

// The rate-limit walkthrough, monthly quota: 300,300,300,300,100,1 against 1000 tokens a month.
TEST_F(AdmissionTest, WalkthroughQuotaTable) {
  config::Config cfg = base_config(redis_.port());
  config::Plan plan;
  plan.quota = config::Quota::monthly(1000, 600);
  add_tenant(cfg, "ws-acme", plan);
  Harness h(cfg);

  const int64_t cost[] = {300, 300, 300, 300, 100, 1};
  const bool allowed[] = {true, true, true, false, true, false};
  const double remaining[] = {700, 400, 100, 100, 0, 0};
  for (int i = 0; i < 6; ++i) {
    SCOPED_TRACE("request " + std::to_string(i + 1));
    AdmitResult r = h.admit(req("ws-acme", cost[i]));
    ASSERT_EQ(r.outcome, allowed[i] ? Outcome::kAllowed : Outcome::kRefused) << r.error;
    EXPECT_EQ(rem(r, "quota"), remaining[i]);
    const Remaining* q = find_gate(r, "quota");
    ASSERT_NE(q, nullptr);
    EXPECT_EQ(q->limit, 1000);
    EXPECT_GE(q->window_s, 28 * 86400);
    EXPECT_LE(q->window_s, 31 * 86400);
    EXPECT_GT(q->reset_s, 0);
    EXPECT_LE(q->reset_s, 31 * 86400);
    if (!allowed[i]) {
      EXPECT_EQ(r.gate, "quota");
      EXPECT_EQ(r.reason, "quota");
      // Until the next UTC month starts.
      EXPECT_NEAR(static_cast<double>(r.retry_after_ms) / 1000.0, static_cast<double>(q->reset_s),
                  2.0);
    }
  }
  // The month key is the current UTC month, from Redis TIME.
  std::time_t now = Sync(redis_.port()).time_s();
  std::tm tm{};
  gmtime_r(&now, &tm);
  char month[8];
  std::strftime(month, sizeof month, "%Y-%m", &tm);
  EXPECT_EQ(Sync(redis_.port()).str({"GET", keys::quota("ws-acme", month)}), "1000");
}

// The rate-limit walkthrough, three gates: tenant 20 @ 5, user 6 @ 2, tool web_search 2 @ 0.5;
// the tool gate refuses the third request, and the tenant and user buckets get their tokens back.
TEST_F(AdmissionTest, WalkthroughThreeGates) {
  config::Config cfg = base_config(redis_.port());
  config::Plan plan;
  plan.tenant = bucket(20, 5);
  plan.user = bucket(6, 2);
  add_tenant(cfg, "ws-acme", plan);
  cfg.global_gates.tool["web_search"] = bucket(2, 0.5);
  Harness h(cfg);

  Clock::time_point second_done;
  double tenant_after_second = 0;
  for (int i = 0; i < 5; ++i) {
    SCOPED_TRACE("request " + std::to_string(i + 1));
    AdmitRequest r = req("ws-acme");
    r.user = "alice";
    r.tool = "web_search";
    AdmitResult res = h.admit(r);
    if (i < 2) {
      ASSERT_EQ(res.outcome, Outcome::kAllowed) << res.error;
      EXPECT_NEAR(rem(res, "tenant"), 19 - i, 0.1);
      EXPECT_NEAR(rem(res, "user"), 5 - i, 0.1);
      EXPECT_NEAR(rem(res, "tool"), 1 - i, 0.1);
      second_done = Clock::now();
      tenant_after_second = rem(res, "tenant");
    } else {
      ASSERT_EQ(res.outcome, Outcome::kRefused);
      EXPECT_EQ(res.gate, "tool");
      EXPECT_EQ(res.reason, "rate");
      EXPECT_GT(res.retry_after_ms, 1500);
      EXPECT_LE(res.retry_after_ms, 2000);
      // Refunded: the tenant and user buckets hold what they held after request 2, plus
      // what refilled since (5/s, 2/s), never less.
      double since = std::chrono::duration<double>(Clock::now() - second_done).count();
      EXPECT_GE(rem(res, "tenant"), 18 - 0.01);
      EXPECT_LE(rem(res, "tenant"), 18 + 5 * since + 0.1);
      EXPECT_GE(rem(res, "user"), 4 - 0.01);
      EXPECT_LE(rem(res, "user"), 4 + 2 * since + 0.1);
      EXPECT_LT(rem(res, "tool"), 1);
    }
  }
  // No trace of the refusals: the tenant bucket holds exactly what request 2 left.
  Sync s(redis_.port());
  double tk = std::stod(s.str({"HGET", keys::bucket("ws-acme", "tenant"), "tk"}));
  EXPECT_EQ(tk, tenant_after_second);
}

// For each gate: when it alone refuses, every key in Redis is byte-identical afterwards.
TEST_F(AdmissionTest, AllOrNothingForEveryGate) {
  config::Config cfg = base_config(redis_.port());
  const std::vector<std::string> gates = {"tenant",      "user",  "api_key", "quota",
                                          "concurrency", "model", "tool",    "model-tool"};
  for (const auto& g : gates) {
    config::Plan plan;
    plan.tenant = bucket(g == "tenant" ? 1 : 100, 0.001);
    plan.user = bucket(g == "user" ? 1 : 100, 0.001);
    plan.api_key = bucket(g == "api_key" ? 1 : 100, 0.001);
    plan.quota = config::Quota::monthly(g == "quota" ? 10 : 100000, 600);
    plan.concurrency = config::Concurrency{g == "concurrency" ? 1 : 100, 600};
    add_tenant(cfg, "t-" + g, plan);
    if (g == "tenant") add_tenant(cfg, "t-fresh", plan);
    cfg.global_gates.model["m-" + g] = bucket(g == "model" ? 1 : 100, 0.001);
    cfg.global_gates.tool["x-" + g] = bucket(g == "tool" || g == "model-tool" ? 1 : 100, 0.001);
  }
  Harness h(cfg);
  Sync s(redis_.port());
  for (const auto& g : gates) {
    SCOPED_TRACE("gate " + g);
    AdmitRequest r = req("t-" + g, 10);
    r.user = "u1";
    r.api_key = "k1";
    r.model = "m-" + g;
    r.tool = "x-" + g;
    // The first admission passes every gate and uses up the one under test.
    AdmitResult first = h.admit(r);
    ASSERT_EQ(first.outcome, Outcome::kAllowed) << first.error;
    // An expired lease, which a refused admission must not prune either.
    s.str({"ZADD", keys::leases("t-" + g), "1000", "t-" + g + ".old"});

    auto before = s.dump();
    AdmitResult second = h.admit(r);
    auto after = s.dump();
    ASSERT_EQ(second.outcome, Outcome::kRefused) << second.error;
    EXPECT_EQ(second.gate, g == "model-tool" ? "tool" : g);
    EXPECT_EQ(before, after);
    EXPECT_EQ(s.reservations("t-" + g).count(second.request_id), 0u);
    // Reported remaining values are those before the refused attempt.
    if (g == "model" || g == "tool") {
      EXPECT_NEAR(rem(second, "tenant"), 99, 0.01);
      EXPECT_EQ(rem(second, "quota"), 100000 - 10);
      EXPECT_EQ(rem(second, "concurrency"), 99);
    }
  }
  // A tenant whose first admission is refused by a global gate: refund.lua deletes the keys
  // admit.lua created (buckets, quota counter, lease set), so nothing of it remains.
  auto before = s.dump();
  AdmitRequest fresh = req("t-fresh", 10);
  fresh.user = "u1";
  fresh.api_key = "k1";
  fresh.model = "m-model";
  AdmitResult r = h.admit(fresh);
  ASSERT_EQ(r.outcome, Outcome::kRefused) << r.error;
  EXPECT_EQ(r.gate, "model");
  EXPECT_EQ(s.dump(), before);
  for (const auto& [k, v] : s.dump()) EXPECT_EQ(k.find("t-fresh"), std::string::npos) << k;
  EXPECT_NEAR(rem(r, "tenant"), 1, 1e-9);  // a full bucket of capacity 1
}

config::Bucket shadow_bucket(double cap, double rate) {
  config::Bucket b{cap, rate};
  b.mode = config::GateMode::kShadow;
  return b;
}

// A shadow bucket of 3 admits the 4th, 5th, ... request, naming itself in shadow_refused; it
// takes a token while it has one and nothing once empty (as an enforcing refusal takes
// nothing): its level never goes below what enforcing would leave.
TEST_F(AdmissionTest, ShadowBucketNeverRefuses) {
  config::Config cfg = base_config(redis_.port());
  config::Plan plan;
  plan.tenant = shadow_bucket(3, 0.0005);  // half the model's refill: twice its wait when empty
  add_tenant(cfg, "sh", plan);
  cfg.global_gates.model["m-sh"] = shadow_bucket(2, 0.001);
  Harness h(cfg);
  Sync s(redis_.port());
  for (int i = 1; i <= 6; ++i) {
    SCOPED_TRACE("admission " + std::to_string(i));
    AdmitRequest r = req("sh");
    r.model = "m-sh";
    AdmitResult a = h.admit(r);
    ASSERT_EQ(a.outcome, Outcome::kAllowed) << a.error;
    // The longest wait: the tenant bucket (capacity 3) runs dry one request after the model's.
    EXPECT_EQ(a.shadow_refused, i <= 2 ? "" : i == 3 ? "model" : "tenant");
    if (i > 3) {
      EXPECT_GT(a.shadow_retry_ms, 0);
    }
    EXPECT_NEAR(rem(a, "tenant"), std::max(0, 3 - i), 0.05);
    EXPECT_NEAR(rem(a, "model"), std::max(0, 2 - i), 0.05);
  }
  EXPECT_NEAR(std::stod(s.str({"HGET", keys::bucket("sh", "tenant"), "tk"})), 0, 0.05);
  EXPECT_NEAR(std::stod(s.str({"HGET", keys::global_bucket("model", "m-sh"), "tk"})), 0, 0.05);
}

// `mode: shadow` on a plan: every gate of it, quota and concurrency included, reports instead of
// refusing; what an admitted request uses (its reservation, its lease) is counted as ever.
TEST_F(AdmissionTest, ShadowPlanCoversQuotaAndConcurrency) {
  config::Config cfg = base_config(redis_.port());
  config::Plan plan;
  plan.mode = config::GateMode::kShadow;
  plan.tenant = bucket(1, 0.001);
  plan.quota = config::Quota::monthly(10, 600);
  plan.concurrency = config::Concurrency{1, 600};
  add_tenant(cfg, "shp", plan);
  Harness h(cfg);
  Sync s(redis_.port());
  AdmitResult first = h.admit(req("shp", 10));
  ASSERT_EQ(first.outcome, Outcome::kAllowed) << first.error;
  EXPECT_EQ(first.shadow_refused, "");
  AdmitResult second = h.admit(req("shp", 10));
  ASSERT_EQ(second.outcome, Outcome::kAllowed) << second.error;
  EXPECT_EQ(second.shadow_refused, "quota");  // the longest wait: the month's end
  std::time_t now = s.time_s();
  std::tm tm{};
  gmtime_r(&now, &tm);
  char month[8];
  std::strftime(month, sizeof month, "%Y-%m", &tm);
  EXPECT_EQ(s.str({"GET", keys::quota("shp", month)}), "20");
  EXPECT_EQ(s.str({"ZCARD", keys::leases("shp")}), "2");
  EXPECT_EQ(s.reservations("shp").size(), 2u);
}

// An enforced gate beside a shadow one still refuses, and the refusal leaves Redis byte for
// byte as it was, also when a shadow bucket on the admitting side took nothing (it is left
// alone by the undo), on either side of the call split.
TEST_F(AdmissionTest, EnforcedBesideShadowUndoesByteForByte) {
  config::Config cfg = base_config(redis_.port());
  config::Plan a;  // shadow tenant bucket, enforced model gate
  a.tenant = shadow_bucket(1, 0.001);
  a.user = bucket(3, 0.001);  // outlasts the model gate: only one gate refuses
  add_tenant(cfg, "sa", a);
  cfg.global_gates.model["m-sa"] = bucket(2, 0.001);
  config::Plan b;  // enforced tenant bucket, shadow model gate
  b.tenant = bucket(2, 0.001);
  add_tenant(cfg, "sb", b);
  cfg.global_gates.model["m-sb"] = shadow_bucket(1, 0.001);
  Harness h(cfg);
  Sync s(redis_.port());
  for (const std::string t : {"sa", "sb"}) {
    SCOPED_TRACE("tenant " + t);
    AdmitRequest r = req(t, 5);
    r.model = "m-" + t;
    r.user = "u";
    ASSERT_EQ(h.admit(r).outcome, Outcome::kAllowed);
    AdmitResult second = h.admit(r);  // the shadow bucket is empty now: admitted all the same
    ASSERT_EQ(second.outcome, Outcome::kAllowed) << second.error;
    EXPECT_EQ(second.shadow_refused, t == "sa" ? "tenant" : "model");
    const auto before = s.dump();
    AdmitResult third = h.admit(r);  // the enforced gate is empty: refused
    ASSERT_EQ(third.outcome, Outcome::kRefused) << third.error;
    EXPECT_EQ(third.gate, t == "sa" ? "model" : "tenant");
    EXPECT_EQ(third.shadow_refused, "");
    EXPECT_EQ(s.dump(), before);
  }
  // The enforced user gate refuses on the tenant's side: the shadow model gate's call is undone.
  AdmitRequest r = req("sa");
  r.user = "u2";
  r.model = "m-sb";
  for (int i = 0; i < 3; ++i) ASSERT_EQ(h.admit(r).outcome, Outcome::kAllowed);
  const auto before = s.dump();
  AdmitResult refused = h.admit(r);
  ASSERT_EQ(refused.outcome, Outcome::kRefused) << refused.error;
  EXPECT_EQ(refused.gate, "user");
  EXPECT_EQ(s.dump(), before);
}

// The brake scales every enforced rate of the plans it does not exempt; shadow gates keep
// theirs. In force from the next request once published (brake_sync.h publishes what it reads).
TEST_F(AdmissionTest, BrakeScalesEnforcedRates) {
  config::Config cfg = base_config(redis_.port());
  config::Plan plan;
  plan.tenant = bucket(10, 0.001);
  add_tenant(cfg, "br", plan);
  add_tenant(cfg, "br-exempt", plan);
  config::Plan shadow;
  shadow.tenant = shadow_bucket(10, 0.001);
  add_tenant(cfg, "br-shadow", shadow);
  Harness h(cfg);
  Brake b;
  b.factor = 0.5;
  b.exempt_plans = {"plan-br-exempt"};
  h.store().publish_brake(std::make_shared<const Brake>(b));
  auto admitted = [&](const std::string& t) {
    int n = 0;
    for (int i = 0; i < 12; ++i) {
      AdmitResult a = h.admit(req(t));
      EXPECT_NE(a.outcome, Outcome::kUnavailable) << a.error;
      if (a.outcome == Outcome::kAllowed && a.shadow_refused.empty()) ++n;
      if (i == 0) {
        EXPECT_EQ(a.brake, t == "br" ? 0.5 : 1.0) << t;
      }
    }
    return n;
  };
  EXPECT_EQ(admitted("br"), 5);
  EXPECT_EQ(admitted("br-exempt"), 10);
  EXPECT_EQ(admitted("br-shadow"), 10);
  // Lifted: the full capacity again (the bucket's level is what the braked takes left).
  h.store().publish_brake(nullptr);
  AdmitResult after = h.admit(req("br"));
  EXPECT_EQ(after.brake, 1.0);
  EXPECT_EQ(find_gate(after, "tenant")->limit, 10);
}

// Token-rate gates take the request's estimate, not 1; each refuses alone, all-or-nothing (every
// key byte-identical after the refusal, the model_tokens gate's taken record included); an
// estimate above a capacity is a 400 naming tokens: no wait would let it pass.
TEST_F(AdmissionTest, TokenRateGatesTakeTheEstimateAllOrNothing) {
  config::Config cfg = base_config(redis_.port());
  config::Plan plan;
  plan.tenant = bucket(100, 0.001);
  plan.tenant_tokens = bucket(1000, 1);
  plan.user_tokens = bucket(600, 1);
  plan.api_key_tokens = bucket(500, 1);
  plan.quota = config::Quota::monthly(100000, 600);
  add_tenant(cfg, "tok", plan);
  config::Plan wide;
  wide.tenant_tokens = bucket(100000, 1);
  add_tenant(cfg, "tok-wide", wide);
  cfg.global_gates.model_tokens["m-tok"] = bucket(800, 1);
  Harness h(cfg);
  Sync s(redis_.port());
  AdmitRequest r = req("tok", 400);
  r.user = "u1";
  r.api_key = "k1";
  r.model = "m-tok";
  AdmitResult first = h.admit(r);
  ASSERT_EQ(first.outcome, Outcome::kAllowed) << first.error;
  EXPECT_NEAR(rem(first, "tenant"), 99, 0.01);
  EXPECT_NEAR(rem(first, "tenant_tokens"), 600, 1);
  EXPECT_NEAR(rem(first, "user_tokens"), 200, 1);
  EXPECT_NEAR(rem(first, "api_key_tokens"), 100, 1);
  EXPECT_NEAR(rem(first, "model_tokens"), 400, 1);
  EXPECT_EQ(s.str({"GET", keys::global_taken("model_tokens", "m-tok", first.request_id)}), "400");

  // 150 > the api key's 100 left: refused by it alone, nothing written anywhere.
  struct Case {
    std::string user, api_key, gate;
    int64_t tokens;
  };
  for (const Case& c :
       {Case{"u1", "k1", "api_key_tokens", 150}, Case{"u1", "k2", "user_tokens", 250},
        Case{"u2", "k2", "model_tokens", 450}, Case{"", "", "tenant_tokens", 650}}) {
    SCOPED_TRACE(c.gate);
    AdmitRequest again = r;
    again.user = c.user;
    again.api_key = c.api_key;
    again.tokens = c.tokens;
    if (c.gate == "tenant_tokens") again.model.clear();
    auto before = s.dump();
    AdmitResult second = h.admit(again);
    ASSERT_EQ(second.outcome, Outcome::kRefused) << second.error;
    EXPECT_EQ(second.gate, c.gate);
    EXPECT_EQ(second.reason, "rate");
    EXPECT_GT(second.retry_after_ms, 0);
    EXPECT_EQ(s.dump(), before);
  }
  // Refused by the model_tokens gate after admit.lua took the tenant's token buckets: refund.lua
  // gives the estimate back byte for byte.
  AdmitRequest w = req("tok-wide", 450);
  w.model = "m-tok";
  auto before = s.dump();
  AdmitResult refused = h.admit(w);
  ASSERT_EQ(refused.outcome, Outcome::kRefused) << refused.error;
  EXPECT_EQ(refused.gate, "model_tokens");
  EXPECT_EQ(s.dump(), before);
  EXPECT_NEAR(rem(refused, "tenant_tokens"), 100000, 1e-6);
  // Refused by the tenant gate while the model_tokens gate admitted: ungates.lua gives the
  // estimate back and removes the taken record.
  s.str({"HSET", keys::bucket("tok", "tenant"), "tk", "0.5", "ts",
         std::to_string(s.time_s()) + "000000"});
  before = s.dump();
  AdmitRequest small = r;
  small.user = "u3";
  small.api_key = "k3";
  small.tokens = 10;
  refused = h.admit(small);
  ASSERT_EQ(refused.outcome, Outcome::kRefused) << refused.error;
  EXPECT_EQ(refused.gate, "tenant");
  EXPECT_EQ(s.dump(), before);

  AdmitRequest huge = req("tok", 1001);
  AdmitResult bad = h.admit(huge);
  EXPECT_EQ(bad.outcome, Outcome::kBadRequest);
  EXPECT_EQ(bad.error,
            "tokens: 1001 exceeds the capacity 1000 of the tenant_tokens gate: it can never be "
            "admitted");
  huge = req("tok-wide", 801);
  huge.model = "m-tok";
  EXPECT_EQ(
      h.admit(huge).error.rfind("tokens: 801 exceeds the capacity 800 of the model_tokens", 0), 0u);
}

// Settle corrects the token-rate gates once: a refund below the estimate, an extra charge above
// it that takes the buckets below zero, so that the next request waits exactly for the debt.
TEST_F(AdmissionTest, SettleCorrectsTheTokenRateGatesOnce) {
  config::Config cfg = base_config(redis_.port());
  config::Plan plan;
  plan.tenant_tokens = bucket(1000, 1);
  plan.quota = config::Quota::monthly(100000, 600);
  add_tenant(cfg, "set", plan);
  cfg.global_gates.model_tokens["m-set"] = bucket(1000, 1);
  Harness h(cfg);
  Sync s(redis_.port());
  auto tk = [&](const std::string& key) { return std::stod(s.str({"HGET", key, "tk"})); };
  const std::string tenant_key = keys::bucket("set", "tenant_tokens");
  const std::string model_key = keys::global_bucket("model_tokens", "m-set");
  AdmitRequest r = req("set", 300);
  r.model = "m-set";
  AdmitResult a = h.admit(r);
  ASSERT_EQ(a.outcome, Outcome::kAllowed) << a.error;
  SettleRequest sr{"set", a.request_id, 100, {}, {}, "m-set"};
  SettleResult st = h.settle(sr);
  ASSERT_EQ(st.outcome, Outcome::kAllowed) << st.error;
  EXPECT_TRUE(st.settled);
  // 1000 - 300 + 200 back (and at most a few seconds of refill, capped at the capacity).
  EXPECT_NEAR(tk(tenant_key), 900, 5);
  EXPECT_NEAR(tk(model_key), 900, 5);
  EXPECT_EQ(s.str({"EXISTS", keys::global_taken("model_tokens", "m-set", a.request_id)}), "0");
  // Again: already settled, nothing corrected twice.
  auto before = s.dump();
  st = h.settle(sr);
  EXPECT_FALSE(st.settled);
  EXPECT_EQ(st.detail, "already_settled");
  EXPECT_EQ(s.dump(), before);

  // 300 reserved, 1500 used: 1200 more, below zero.
  a = h.admit(r);
  ASSERT_EQ(a.outcome, Outcome::kAllowed) << a.error;
  st = h.settle(SettleRequest{"set", a.request_id, 1500, {}, {}, "m-set"});
  ASSERT_TRUE(st.settled) << st.error;
  const double t_level = tk(tenant_key), m_level = tk(model_key);
  EXPECT_NEAR(t_level, -600, 10);
  EXPECT_NEAR(m_level, -600, 10);
  // The next request (10 tokens) waits for the debt: (10 - level) / 1 per s, to the second.
  AdmitResult next = h.admit(req("set", 10));
  ASSERT_EQ(next.outcome, Outcome::kRefused);
  EXPECT_EQ(next.gate, "tenant_tokens");
  EXPECT_NEAR(static_cast<double>(next.retry_after_ms), (10 - t_level) * 1000, 2000);
}

// A stream's charges take the quota and the token-rate gate as they come, keep the lease past
// lease_s, answer 429 quota on the charge that crosses the budget (recorded: the tokens were
// used); the settle's total subtracts what the reservation and the charges took; a charge after
// the settle is a 409 that changes nothing, one for an unknown request a 404.
TEST_F(AdmissionTest, StreamChargesRenewTheLeaseAndStopAtTheQuota) {
  config::Config cfg = base_config(redis_.port());
  config::Plan plan;
  plan.tenant_tokens = bucket(100000, 1);
  plan.quota = config::Quota::monthly(1000, 600);
  plan.concurrency = config::Concurrency{1, 1};
  add_tenant(cfg, "str", plan);
  Harness h(cfg);
  Sync s(redis_.port());
  auto used = [&] { return s.str({"GET", keys::quota("str", keys::current_months().cur.name)}); };
  AdmitResult a = h.admit(req("str", 100));
  ASSERT_EQ(a.outcome, Outcome::kAllowed) << a.error;
  ChargeRequest c{"str", a.request_id, 100, {}, {}, {}};
  // Three charges over 1.8 s: the lease of 1 s is renewed by each, so the one stream allowed
  // is still held.
  for (int i = 0; i < 3; ++i) {
    std::this_thread::sleep_for(milliseconds(600));
    ChargeResult cr = h.charge(c);
    ASSERT_EQ(cr.outcome, Outcome::kAllowed) << cr.error;
    EXPECT_EQ(cr.charged, 100 + 100 * (i + 1));
    EXPECT_EQ(cr.lease_s, 1);
  }
  EXPECT_EQ(used(), "400");
  EXPECT_NEAR(std::stod(s.str({"HGET", keys::bucket("str", "tenant_tokens"), "tk"})), 99600, 10);
  AdmitResult other = h.admit(req("str", 1));
  EXPECT_EQ(other.outcome, Outcome::kRefused);
  EXPECT_EQ(other.gate, "concurrency");
  // 400 + 700 = 1100 > 1000: recorded, and the stream is told to stop.
  c.tokens = 700;
  ChargeResult over = h.charge(c);
  EXPECT_EQ(over.outcome, Outcome::kRefused);
  EXPECT_EQ(over.gate, "quota");
  EXPECT_EQ(over.reason, "quota");
  EXPECT_GT(over.retry_after_ms, 0);
  EXPECT_EQ(used(), "1100");
  // The stream's total: 1150, of which 1100 were taken.
  SettleResult st = h.settle("str", a.request_id, 1150);
  ASSERT_TRUE(st.settled) << st.error;
  EXPECT_EQ(used(), "1150");
  auto before = s.dump();
  c.tokens = 5;
  ChargeResult late = h.charge(c);
  EXPECT_EQ(late.outcome, Outcome::kConflict);
  EXPECT_EQ(s.dump(), before);
  c.request_id = "never-admitted";
  ChargeResult unknown = h.charge(c);
  EXPECT_EQ(unknown.outcome, Outcome::kNotFound);
  EXPECT_EQ(s.dump(), before);
}

// The race: 40 requests in flight at all times on one tenant_tokens gate never admit more tokens
// than capacity + refill * t + one request's estimate.
TEST_F(AdmissionTest, TokenRateGateHoldsUnderFortyInFlight) {
  config::Config cfg = base_config(redis_.port());
  cfg.redis.pool_size = 4;
  config::Plan plan;
  plan.tenant_tokens = bucket(1000, 200);
  add_tenant(cfg, "race", plan);
  Harness h(cfg);
  constexpr int64_t kEstimate = 37;
  int64_t admitted = 0;
  int inflight = 0, errors = 0, refused = 0;
  const auto start = Clock::now();
  std::function<void()> issue = [&] {
    ++inflight;
    h.engine().admit(req("race", kEstimate), [&](AdmitResult r) {
      --inflight;
      if (r.outcome == Outcome::kAllowed)
        admitted += kEstimate;
      else if (r.outcome == Outcome::kRefused)
        ++refused;
      else
        ++errors;
      if (Clock::now() - start < milliseconds(1500)) issue();
    });
  };
  for (int i = 0; i < 40; ++i) issue();
  ASSERT_TRUE(h.wait_until([&] { return inflight == 0; }, milliseconds(30000)));
  const double t = std::chrono::duration<double>(Clock::now() - start).count();
  EXPECT_EQ(errors, 0);
  EXPECT_GT(refused, 0);
  EXPECT_GE(admitted, 1000 - kEstimate);
  EXPECT_LE(static_cast<double>(admitted), 1000 + 200 * t + kEstimate) << "t " << t << " s";
  std::printf("race: 40 in flight, %.2f s, admitted %lld tokens (bound %.0f), %d refused\n", t,
              static_cast<long long>(admitted), 1000 + 200 * t + kEstimate, refused);
}

// >= 32 threads, each with its own loop and engine, hammering one tenant.
TEST_F(AdmissionTest, ConcurrentHammering) {
  config::Config cfg = base_config(redis_.port());
  cfg.redis.pool_size = 1;
  cfg.redis.timeout_ms = 5000;
  config::Plan rate;
  rate.tenant = bucket(20, 10);
  add_tenant(cfg, "hammer-rate", rate);
  config::Plan quota;
  quota.quota = config::Quota::monthly(1000, 600);
  add_tenant(cfg, "hammer-quota", quota);

  constexpr int kThreads = 32;
  std::atomic<int> rate_ok{0}, quota_ok{0}, errors{0};
  auto start = Clock::now();
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      Harness h(cfg);
      auto end = Clock::now() + milliseconds(1500);
      while (Clock::now() < end) {
        AdmitResult a = h.admit(req("hammer-rate"));
        if (a.outcome == Outcome::kAllowed) ++rate_ok;
        if (a.outcome != Outcome::kAllowed && a.outcome != Outcome::kRefused) ++errors;
        AdmitResult b = h.admit(req("hammer-quota", 7));
        if (b.outcome == Outcome::kAllowed) ++quota_ok;
        if (b.outcome != Outcome::kAllowed && b.outcome != Outcome::kRefused) ++errors;
      }
    });
  }
  for (auto& t : threads) t.join();
  double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  EXPECT_EQ(errors.load(), 0);
  EXPECT_GE(rate_ok.load(), 20);
  EXPECT_LE(rate_ok.load(), 20 + 10 * elapsed + 1) << "elapsed " << elapsed << " s";
  // All-or-nothing and atomic: exactly floor(1000 / 7) reservations fit, never more.
  EXPECT_EQ(quota_ok.load(), 1000 / 7);
  std::time_t now = Sync(redis_.port()).time_s();
  std::tm tm{};
  gmtime_r(&now, &tm);
  char month[8];
  std::strftime(month, sizeof month, "%Y-%m", &tm);
  EXPECT_EQ(Sync(redis_.port()).str({"GET", keys::quota("hammer-quota", month)}),
            std::to_string(1000 / 7 * 7));
  std::printf("hammer: %d threads, %.2f s, rate gate admitted %d (bound %.1f), quota %d\n",
              kThreads, elapsed, rate_ok.load(), 20 + 10 * elapsed + 1, quota_ok.load());
}

// A tenant that never settles cannot fill Redis: past quota.max_open_reservations an admission
// is refused (429, reason "reservations") until one is settled (or its window expires).
TEST_F(AdmissionTest, OpenReservationsAreCapped) {
  config::Config cfg = base_config(redis_.port());
  config::Plan plan;
  plan.quota = config::Quota::monthly(1000, 600, 3);
  add_tenant(cfg, "ws-acme", plan);
  Harness h(cfg);
  std::vector<std::string> rids;
  for (int i = 0; i < 3; ++i) {
    AdmitResult a = h.admit(req("ws-acme", 10));
    ASSERT_EQ(a.outcome, Outcome::kAllowed) << i;
    rids.push_back(a.request_id);
  }
  AdmitResult full = h.admit(req("ws-acme", 10));
  EXPECT_EQ(full.outcome, Outcome::kRefused);
  EXPECT_EQ(full.gate, "reservations");
  EXPECT_EQ(full.reason, "reservations");
  EXPECT_GT(full.retry_after_ms, 0);
  EXPECT_LE(full.retry_after_ms, 2 * 600 * 1000 + 1000);
  EXPECT_EQ(rem(full, "quota"), 1000 - 30);  // the refusal charged nothing
  ASSERT_TRUE(h.settle("", rids[0], 5).settled);
  // A settled one is no longer open; settling it again changes nothing.
  EXPECT_FALSE(h.settle("", rids[0], 5).settled);
  EXPECT_EQ(h.admit(req("ws-acme", 10)).outcome, Outcome::kAllowed);
  EXPECT_EQ(h.admit(req("ws-acme", 10)).outcome, Outcome::kRefused);
}

TEST_F(AdmissionTest, SettleIsIdempotent) {
  config::Config cfg = base_config(redis_.port());
  config::Plan plan;
  plan.quota = config::Quota::monthly(1000, 600);
  add_tenant(cfg, "ws-acme", plan);
  config::Plan open;  // no quota at all
  add_tenant(cfg, "ws-open", open);
  Harness h(cfg);

  AdmitResult a = h.admit(req("ws-acme", 100));
  ASSERT_EQ(a.outcome, Outcome::kAllowed);
  EXPECT_EQ(rem(a, "quota"), 900);
  // The tenant is derived from the generated request id.
  SettleResult s1 = h.settle("", a.request_id, 250);
  ASSERT_EQ(s1.outcome, Outcome::kAllowed) << s1.error;
  EXPECT_TRUE(s1.settled);
  EXPECT_EQ(s1.detail, "settled");
  EXPECT_EQ(s1.charged, 250);
  EXPECT_EQ(s1.remaining, 750);
  SettleResult s2 = h.settle("ws-acme", a.request_id, 999);
  ASSERT_EQ(s2.outcome, Outcome::kAllowed);
  EXPECT_FALSE(s2.settled);
  EXPECT_EQ(s2.detail, "already_settled");
  EXPECT_EQ(s2.charged, 250);
  EXPECT_EQ(s2.remaining, 750);
  // Settling below the estimate gives tokens back.
  AdmitResult b = h.admit(req("ws-acme", 500));
  ASSERT_EQ(b.outcome, Outcome::kAllowed);
  EXPECT_EQ(rem(b, "quota"), 250);
  SettleResult s3 = h.settle("", b.request_id, 50);
  EXPECT_TRUE(s3.settled);
  EXPECT_EQ(s3.remaining, 700);
  // Unknown reservation: nothing changes.
  SettleResult s4 = h.settle("ws-acme", "no-such-request", 10);
  ASSERT_EQ(s4.outcome, Outcome::kAllowed);
  EXPECT_FALSE(s4.settled);
  EXPECT_EQ(s4.detail, "expired");
  EXPECT_EQ(s4.remaining, 700);
  // A request id in use (its reservation is live, settled or not) is a conflict.
  AdmitRequest dup = req("ws-acme", 1);
  dup.request_id = a.request_id;
  AdmitResult d = h.admit(dup);
  EXPECT_EQ(d.outcome, Outcome::kConflict);
  EXPECT_EQ(d.error.rfind("request_id: ", 0), 0u) << d.error;
  // Without a quota the reservation still makes settle idempotent; remaining is -1.
  AdmitResult o = h.admit(req("ws-open", 5));
  ASSERT_EQ(o.outcome, Outcome::kAllowed);
  EXPECT_EQ(find_gate(o, "quota"), nullptr);
  SettleResult so = h.settle("", o.request_id, 7);
  EXPECT_TRUE(so.settled);
  EXPECT_EQ(so.remaining, -1);
  EXPECT_FALSE(h.settle("", o.request_id, 7).settled);
}

TEST_F(AdmissionTest, ReservationExpiresAndStaysCharged) {
  config::Config cfg = base_config(redis_.port());
  config::Plan plan;
  plan.quota = config::Quota::monthly(1000, 1);
  add_tenant(cfg, "ws-acme", plan);
  Harness h(cfg);
  Sync s(redis_.port());

  AdmitResult a = h.admit(req("ws-acme", 100));
  ASSERT_EQ(a.outcome, Outcome::kAllowed);
  EXPECT_EQ(s.reservations("ws-acme").count(a.request_id), 1u);
  std::this_thread::sleep_for(milliseconds(1100));
  SettleResult st = h.settle("", a.request_id, 10);
  ASSERT_EQ(st.outcome, Outcome::kAllowed);
  EXPECT_FALSE(st.settled);
  EXPECT_EQ(st.detail, "expired");
  EXPECT_EQ(st.remaining, 900);  // the estimate stays charged
  // Its window goes too, at most 2 * reservation_ttl_s + 1 s after it was created.
  EXPECT_TRUE(h.wait_until([&] { return s.reservations("ws-acme").empty(); }, milliseconds(3000)));
  AdmitResult b = h.admit(req("ws-acme", 0));
  EXPECT_EQ(rem(b, "quota"), 900);
}

TEST_F(AdmissionTest, ConcurrencyGateAndRelease) {
  config::Config cfg = base_config(redis_.port());
  config::Plan plan;
  plan.concurrency = config::Concurrency{2, 30};
  add_tenant(cfg, "ws-acme", plan);
  Harness h(cfg);

  AdmitResult a = h.admit(req("ws-acme"));
  AdmitResult b = h.admit(req("ws-acme"));
  ASSERT_EQ(a.outcome, Outcome::kAllowed);
  ASSERT_EQ(b.outcome, Outcome::kAllowed);
  EXPECT_EQ(rem(a, "concurrency"), 1);
  EXPECT_EQ(rem(b, "concurrency"), 0);
  AdmitResult c = h.admit(req("ws-acme"));
  ASSERT_EQ(c.outcome, Outcome::kRefused);
  EXPECT_EQ(c.gate, "concurrency");
  EXPECT_EQ(c.reason, "concurrency");
  EXPECT_GT(c.retry_after_ms, 29000);  // until the earliest lease ends
  EXPECT_LE(c.retry_after_ms, 30000);

  ReleaseResult r1 = h.release("", a.request_id);
  ASSERT_EQ(r1.outcome, Outcome::kAllowed) << r1.error;
  EXPECT_TRUE(r1.released);
  EXPECT_FALSE(h.release("ws-acme", a.request_id).released);
  AdmitResult d = h.admit(req("ws-acme"));
  EXPECT_EQ(d.outcome, Outcome::kAllowed);
}

TEST_F(AdmissionTest, LeasesExpireByDeadline) {
  config::Config cfg = base_config(redis_.port());
  config::Plan plan;
  plan.concurrency = config::Concurrency{1, 1};
  add_tenant(cfg, "ws-acme", plan);
  Harness h(cfg);
  AdmitResult a = h.admit(req("ws-acme"));
  ASSERT_EQ(a.outcome, Outcome::kAllowed);
  EXPECT_EQ(h.admit(req("ws-acme")).outcome, Outcome::kRefused);
  std::this_thread::sleep_for(milliseconds(1100));
  EXPECT_EQ(h.admit(req("ws-acme")).outcome, Outcome::kAllowed);
  // The expired lease was pruned by that admission; only the new one is left.
  EXPECT_EQ(Sync(redis_.port()).str({"ZCARD", keys::leases("ws-acme")}), "1");
  EXPECT_FALSE(h.release("", a.request_id).released);  // past its deadline
}

// tenants: { "*": { plan } }: every tenant not listed gets buckets and a quota of its own on the
// default plan, under keys named after it; listed tenants keep their own plan.
TEST_F(AdmissionTest, UnlistedTenantsOnTheDefaultPlanHaveTheirOwnBuckets) {
  config::Config cfg = base_config(redis_.port());
  config::Plan free_plan;
  free_plan.name = "free";
  free_plan.cls = "bronze";
  free_plan.tenant = bucket(2, 0.001);
  free_plan.quota = config::Quota::monthly(100, 600, 0);
  cfg.plans["free"] = free_plan;
  cfg.tenants["*"] = config::Tenant{"*", "free"};
  config::Plan pro;
  pro.tenant = bucket(5, 0.001);
  add_tenant(cfg, "ws-pro", pro);
  Harness h(cfg);

  for (const std::string t : {"anon-a", "anon-b"}) {
    SCOPED_TRACE(t);
    for (int i = 0; i < 2; ++i) {
      AdmitResult r = h.admit(req(t, 10));
      ASSERT_EQ(r.outcome, Outcome::kAllowed) << r.error;
      EXPECT_EQ(r.cls, "bronze");
      EXPECT_EQ(r.request_id.rfind(t + ".", 0), 0u);
      EXPECT_NEAR(rem(r, "tenant"), 1 - i, 0.1);
    }
    AdmitResult refused = h.admit(req(t, 10));
    ASSERT_EQ(refused.outcome, Outcome::kRefused);
    EXPECT_EQ(refused.gate, "tenant");
  }
  // Each has its own keys: bucket and reservations under its own hash tag.
  Sync redis(redis_.port());
  for (const std::string t : {"anon-a", "anon-b"}) {
    EXPECT_EQ(redis.str({"EXISTS", keys::bucket(t, "tenant")}), "1") << t;
    EXPECT_EQ(redis.reservations(t).size(), 2u) << t;
  }
  EXPECT_EQ(redis.str({"EXISTS", keys::bucket("*", "tenant")}), "0");
  // Settle derives the tenant from the request id and charges that tenant's quota.
  AdmitResult c = h.admit(req("anon-c", 10));
  ASSERT_EQ(c.outcome, Outcome::kAllowed) << c.error;
  SettleResult settled = h.settle("", c.request_id, 7);
  ASSERT_EQ(settled.outcome, Outcome::kAllowed) << settled.error;
  EXPECT_TRUE(settled.settled);
  EXPECT_EQ(settled.remaining, 93);
  // A listed tenant keeps its plan.
  AdmitResult pro_r = h.admit(req("ws-pro"));
  ASSERT_EQ(pro_r.outcome, Outcome::kAllowed) << pro_r.error;
  EXPECT_NEAR(rem(pro_r, "tenant"), 4, 0.1);
  // "*" itself is not a tenant anyone can name.
  EXPECT_EQ(h.admit(req("*")).outcome, Outcome::kBadRequest);

  // Without the "*" entry an unlisted tenant is refused as before.
  config::Config listed_only = base_config(redis_.port());
  add_tenant(listed_only, "ws-pro", pro);
  Harness h2(listed_only);
  EXPECT_EQ(h2.admit(req("anon-a")).error, "tenant: unknown tenant 'anon-a'");
}

// A snapshot published while a request is in flight: that request finishes on the one it started
// with; the next one runs on the new one.
TEST_F(AdmissionTest, ARequestKeepsTheSnapshotItStartedWith) {
  config::Config before = base_config(redis_.port());
  config::Plan roomy;
  roomy.cls = "gold";
  roomy.tenant = bucket(100, 0.001);
  add_tenant(before, "ws-acme", roomy);
  config::Config after = before;
  config::Plan tight = roomy;
  tight.name = "plan-ws-acme";
  tight.cls = "silver";
  tight.tenant = bucket(1, 0.001);
  after.plans["plan-ws-acme"] = tight;
  Harness h(before);

  std::optional<AdmitResult> first;
  h.engine().admit(req("ws-acme"), [&](AdmitResult r) { first = std::move(r); });
  // The call is on its way; the configuration changes under it.
  h.store().publish(std::make_shared<const Snapshot>(after, "next"));
  ASSERT_TRUE(h.wait_until([&] { return first.has_value(); }, milliseconds(10000)));
  ASSERT_EQ(first->outcome, Outcome::kAllowed) << first->error;
  EXPECT_EQ(first->cls, "gold");
  EXPECT_NEAR(rem(*first, "tenant"), 99, 0.1);
  EXPECT_EQ(h.engine().snapshot()->hash, "next");
  // The bucket holds 99 tokens, the new capacity is 1: one more, then refused.
  AdmitResult second = h.admit(req("ws-acme"));
  ASSERT_EQ(second.outcome, Outcome::kAllowed) << second.error;
  EXPECT_EQ(second.cls, "silver");
  EXPECT_NEAR(rem(second, "tenant"), 0, 0.1);
  EXPECT_EQ(h.admit(req("ws-acme")).outcome, Outcome::kRefused);
}

TEST_F(AdmissionTest, BadInputNamesTheField) {
  config::Config cfg = base_config(redis_.port());
  config::Plan plan;
  plan.tenant = bucket(5, 1);
  add_tenant(cfg, "ws-acme", plan);
  Harness h(cfg);

  auto expect_bad = [&](AdmitRequest r, const std::string& field) {
    AdmitResult res = h.admit(r);
    EXPECT_EQ(res.outcome, Outcome::kBadRequest) << field;
    EXPECT_EQ(res.error.rfind(field + ": ", 0), 0u) << res.error;
  };
  expect_bad(req(""), "tenant");
  expect_bad(req("ws acme"), "tenant");
  expect_bad(req("nobody"), "tenant");
  EXPECT_EQ(h.admit(req("nobody")).error, "tenant: unknown tenant 'nobody'");
  expect_bad(req("ws-acme", -1), "tokens");
  expect_bad(req("ws-acme", int64_t{1} << 62), "tokens");
  std::string long_id(65, 'a');
  for (const std::string& bad :
       {std::string("a/b"), std::string("x}y"), long_id, std::string("a\nb"), std::string("é")}) {
    AdmitRequest r = req("ws-acme");
    r.user = bad;
    expect_bad(r, "user");
    r = req("ws-acme");
    r.api_key = bad;
    expect_bad(r, "api_key");
    r = req("ws-acme");
    r.model = bad;
    expect_bad(r, "model");
    r = req("ws-acme");
    r.tool = bad;
    expect_bad(r, "tool");
    r = req("ws-acme");
    r.request_id = bad;
    expect_bad(r, "request_id");
  }
  // Nothing was consumed by the bad requests.
  AdmitResult ok = h.admit(req("ws-acme"));
  ASSERT_EQ(ok.outcome, Outcome::kAllowed);
  EXPECT_NEAR(rem(ok, "tenant"), 4, 0.1);

  SettleResult s = h.settle("", "no-dot-here", 1);
  EXPECT_EQ(s.outcome, Outcome::kBadRequest);
  EXPECT_EQ(s.error.rfind("tenant: ", 0), 0u) << s.error;
  s = h.settle("", "nobody.0123456789abcdef", 1);
  EXPECT_EQ(s.error, "tenant: unknown tenant 'nobody'");
  s = h.settle("ws-acme", "bad id", 1);
  EXPECT_EQ(s.error.rfind("request_id: ", 0), 0u) << s.error;
  s = h.settle("ws-acme", ok.request_id, -5);
  EXPECT_EQ(s.error.rfind("tokens: ", 0), 0u) << s.error;
  ReleaseResult r = h.release("", "");
  EXPECT_EQ(r.outcome, Outcome::kBadRequest);
  EXPECT_EQ(r.error.rfind("request_id: ", 0), 0u) << r.error;
  r = h.release("ws acme", "x");
  EXPECT_EQ(r.error.rfind("tenant: ", 0), 0u) << r.error;
}

AdmitRequest from(const std::string& tenant, const std::string& client_ip) {
  AdmitRequest r = req(tenant);
  r.client_ip = client_ip;
  return r;
}

// The ip gate: a bucket per client address within the tenant. IPv4-mapped IPv6 is the IPv4
// address; IPv6 addresses share their /64's bucket.
TEST_F(AdmissionTest, IpGateLimitsEachAddressNotAcrossAddresses) {
  config::Config cfg = base_config(redis_.port());
  config::Plan plan;
  plan.tenant = bucket(100, 0.001);
  plan.ip = bucket(2, 0.001);
  add_tenant(cfg, "ws-acme", plan);
  add_tenant(cfg, "ws-other", plan);
  Harness h(cfg);
  Sync s(redis_.port());

  for (const std::string ip : {"203.0.113.7", "::ffff:203.0.113.7"}) {
    AdmitResult r = h.admit(from("ws-acme", ip));
    ASSERT_EQ(r.outcome, Outcome::kAllowed) << ip << " " << r.error;
  }
  AdmitResult refused = h.admit(from("ws-acme", "203.0.113.7"));
  ASSERT_EQ(refused.outcome, Outcome::kRefused);
  EXPECT_EQ(refused.gate, "ip");
  EXPECT_EQ(refused.reason, "rate");
  EXPECT_GT(refused.retry_after_ms, 0);
  EXPECT_NEAR(rem(refused, "ip"), 0, 0.01);
  EXPECT_EQ(h.admit(from("ws-acme", "::ffff:203.0.113.7")).gate, "ip");
  // Another address, and the same address at another tenant, have buckets of their own.
  AdmitResult other = h.admit(from("ws-acme", "203.0.113.8"));
  ASSERT_EQ(other.outcome, Outcome::kAllowed) << other.error;
  EXPECT_NEAR(rem(other, "ip"), 1, 0.01);
  EXPECT_EQ(h.admit(from("ws-other", "203.0.113.7")).outcome, Outcome::kAllowed);
  EXPECT_EQ(s.str({"EXISTS", keys::bucket("ws-acme", "ip", "203.0.113.7")}), "1");

  // Two addresses of one /64 share a bucket; the next /64 has its own.
  ASSERT_EQ(h.admit(from("ws-acme", "2001:db8:1:2::1")).outcome, Outcome::kAllowed);
  ASSERT_EQ(h.admit(from("ws-acme", "2001:db8:1:2:ffff:ffff:ffff:fffe")).outcome,
            Outcome::kAllowed);
  AdmitResult same64 = h.admit(from("ws-acme", "2001:db8:1:2:dead::beef"));
  ASSERT_EQ(same64.outcome, Outcome::kRefused);
  EXPECT_EQ(same64.gate, "ip");
  AdmitResult next64 = h.admit(from("ws-acme", "2001:db8:1:3::1"));
  EXPECT_EQ(next64.outcome, Outcome::kAllowed) << next64.error;
  EXPECT_EQ(s.str({"EXISTS", keys::bucket("ws-acme", "ip", "2001:db8:1:2::/64")}), "1");

  // Without a client_ip the ip gate does not apply (as user and api_key without theirs).
  AdmitResult anonymous = h.admit(req("ws-acme"));
  ASSERT_EQ(anonymous.outcome, Outcome::kAllowed) << anonymous.error;
  EXPECT_EQ(find_gate(anonymous, "ip"), nullptr);

  // A bad address is a 400 naming client_ip, under a plan with or without an ip gate, and
  // charges nothing.
  auto before = s.dump();
  for (const std::string bad : {"203.0.113.256", "2001:db8::/64", "fe80::1%eth0", " 1.2.3.4",
                                "example.com", "1.2.3.4:80"}) {
    AdmitResult r = h.admit(from("ws-acme", bad));
    EXPECT_EQ(r.outcome, Outcome::kBadRequest) << bad;
    EXPECT_EQ(r.error, "client_ip: must be an IPv4 or IPv6 address") << bad;
  }
  EXPECT_EQ(s.dump(), before);
}

// The global ip gate: one bucket per client address across every tenant, so tenant ids
// invented under the "*" plan bring no fresh bucket. IPv6 addresses share their /64's, an
// IPv4-mapped address is its IPv4 address. All-or-nothing both ways: an ip refusal charges no
// other gate, another gate's refusal gives the ip bucket its token back.
TEST_F(AdmissionTest, GlobalIpGateLimitsEachAddressAcrossTenants) {
  config::Config cfg = base_config(redis_.port());
  config::Plan plan;
  plan.tenant = bucket(100, 0.001);
  plan.ip = bucket(100, 0.001);
  plan.name = "free";
  cfg.plans["free"] = plan;
  cfg.tenants["*"] = config::Tenant{"*", "free"};
  config::Plan tight = plan;
  tight.tenant = bucket(1, 0.001);
  add_tenant(cfg, "ws-tight", tight);
  cfg.global_gates.ip = bucket(3, 0.001);
  cfg.global_gates.model["m-one"] = bucket(1, 0.001);
  Harness h(cfg);
  Sync s(redis_.port());

  // One address under three tenant ids, two of them invented: one bucket.
  ASSERT_EQ(h.admit(from("ws-a", "203.0.113.7")).outcome, Outcome::kAllowed);
  ASSERT_EQ(h.admit(from("made-up-1", "::ffff:203.0.113.7")).outcome, Outcome::kAllowed);
  AdmitResult third = h.admit(from("made-up-2", "203.0.113.7"));
  ASSERT_EQ(third.outcome, Outcome::kAllowed) << third.error;
  EXPECT_NEAR(rem(third, "global_ip"), 0, 0.01);
  EXPECT_NEAR(rem(third, "ip"), 99, 0.01);  // the tenant's own ip gate is fresh
  auto before = s.dump();
  AdmitResult refused = h.admit(from("made-up-3", "::ffff:203.0.113.7"));
  ASSERT_EQ(refused.outcome, Outcome::kRefused) << refused.error;
  EXPECT_EQ(refused.gate, "global_ip");
  EXPECT_EQ(refused.reason, "rate");
  EXPECT_GT(refused.retry_after_ms, 0);
  EXPECT_EQ(s.dump(), before);  // nothing charged elsewhere, no bucket for made-up-3
  EXPECT_EQ(s.str({"EXISTS", keys::global_bucket("global_ip", "203.0.113.7")}), "1");
  // Another address has a bucket of its own.
  AdmitResult other = h.admit(from("made-up-3", "203.0.113.8"));
  ASSERT_EQ(other.outcome, Outcome::kAllowed) << other.error;
  EXPECT_NEAR(rem(other, "global_ip"), 2, 0.01);

  // Two addresses of one /64 share a bucket across tenants; the next /64 has its own.
  ASSERT_EQ(h.admit(from("v6-a", "2001:db8:1:2::1")).outcome, Outcome::kAllowed);
  ASSERT_EQ(h.admit(from("v6-b", "2001:db8:1:2:ffff:ffff:ffff:fffe")).outcome, Outcome::kAllowed);
  ASSERT_EQ(h.admit(from("v6-c", "2001:db8:1:2::2")).outcome, Outcome::kAllowed);
  AdmitResult same64 = h.admit(from("v6-d", "2001:db8:1:2:dead::beef"));
  ASSERT_EQ(same64.outcome, Outcome::kRefused);
  EXPECT_EQ(same64.gate, "global_ip");
  AdmitResult next64 = h.admit(from("v6-d", "2001:db8:1:3::1"));
  EXPECT_EQ(next64.outcome, Outcome::kAllowed) << next64.error;
  EXPECT_EQ(s.str({"EXISTS", keys::global_bucket("global_ip", "2001:db8:1:2::/64")}), "1");
  EXPECT_EQ(s.str({"EXISTS", keys::global_bucket("global_ip", "2001:db8:1:3::/64")}), "1");

  // Refused by another gate, the request gives the ip bucket its token back: by a global gate
  // (the model's), and by its tenant's.
  AdmitRequest with_model = from("ws-b", "198.51.100.1");
  with_model.model = "m-one";
  ASSERT_EQ(h.admit(with_model).outcome, Outcome::kAllowed);
  before = s.dump();
  AdmitResult by_model = h.admit(with_model);
  ASSERT_EQ(by_model.outcome, Outcome::kRefused) << by_model.error;
  EXPECT_EQ(by_model.gate, "model");
  EXPECT_EQ(s.dump(), before);
  ASSERT_EQ(h.admit(from("ws-tight", "198.51.100.1")).outcome, Outcome::kAllowed);
  before = s.dump();
  AdmitResult by_tenant = h.admit(from("ws-tight", "198.51.100.1"));
  ASSERT_EQ(by_tenant.outcome, Outcome::kRefused) << by_tenant.error;
  EXPECT_EQ(by_tenant.gate, "tenant");
  EXPECT_EQ(s.dump(), before);
  // What the refusals left: the address took two of its three tokens.
  EXPECT_NEAR(std::stod(s.str({"HGET", keys::global_bucket("global_ip", "198.51.100.1"), "tk"})), 1,
              0.01);

  // Without a client_ip the gate does not apply.
  AdmitResult anonymous = h.admit(req("made-up-4"));
  ASSERT_EQ(anonymous.outcome, Outcome::kAllowed) << anonymous.error;
  EXPECT_EQ(find_gate(anonymous, "global_ip"), nullptr);
}

// The total gate: one bucket for every admission of every tenant. A refusal by it is
// all-or-nothing: the tenant's part (every tenant gate, ip included) is refunded byte for byte.
TEST_F(AdmissionTest, TotalGateLimitsAcrossTenantsAndRefusesAllOrNothing) {
  config::Config cfg = base_config(redis_.port());
  config::Plan plan;
  plan.tenant = bucket(100, 0.001);
  plan.user = bucket(100, 0.001);
  plan.api_key = bucket(100, 0.001);
  plan.ip = bucket(100, 0.001);
  plan.quota = config::Quota::monthly(100000, 600);
  plan.concurrency = config::Concurrency{100, 600};
  add_tenant(cfg, "ws-a", plan);
  add_tenant(cfg, "ws-b", plan);
  cfg.global_gates.total = bucket(3, 0.001);
  cfg.global_gates.model["m1"] = bucket(100, 0.001);
  Harness h(cfg);
  Sync s(redis_.port());

  auto full = [](const std::string& tenant) {
    AdmitRequest r = req(tenant, 10);
    r.user = "u1";
    r.api_key = "k1";
    r.client_ip = "198.51.100.1";
    r.model = "m1";
    return r;
  };
  for (const std::string t : {"ws-a", "ws-b", "ws-a"}) {
    AdmitResult r = h.admit(full(t));
    ASSERT_EQ(r.outcome, Outcome::kAllowed) << t << " " << r.error;
  }
  auto before = s.dump();
  AdmitResult refused = h.admit(full("ws-b"));
  ASSERT_EQ(refused.outcome, Outcome::kRefused) << refused.error;
  EXPECT_EQ(refused.gate, "total");
  EXPECT_EQ(refused.reason, "rate");
  EXPECT_GT(refused.retry_after_ms, 0);
  EXPECT_EQ(s.dump(), before);
  EXPECT_EQ(s.reservations("ws-b").count(refused.request_id), 0u);
  // The levels reported are those before the refused attempt.
  EXPECT_NEAR(rem(refused, "tenant"), 99, 0.01);
  EXPECT_NEAR(rem(refused, "ip"), 99, 0.01);
  EXPECT_NEAR(rem(refused, "model"), 97, 0.01);
  EXPECT_LT(rem(refused, "total"), 1);
  // Without a model, a client_ip or any other gate, the total gate still applies.
  AdmitResult bare = h.admit(req("ws-a"));
  ASSERT_EQ(bare.outcome, Outcome::kRefused);
  EXPECT_EQ(bare.gate, "total");
  EXPECT_EQ(s.str({"EXISTS", keys::total_bucket()}), "1");
}

// A request its tenant's own bucket refuses costs a global gate's slot (shared by every tenant)
// nothing once the engine knows that bucket is empty (refusal_hints.h): the admissions that
// empty it ask the model gate, the refused ones that follow do not, where each would leave a
// call, its undo and a 60 s marker there. The answers are the same: refused by "tenant". Another
// tenant's requests still go to both slots at once.
TEST_F(AdmissionTest, ARequestItsTenantRefusesCostsTheGlobalGatesNothing) {
  config::Config cfg = base_config(redis_.port());
  config::Plan plan;
  plan.tenant = bucket(2, 0.01);
  add_tenant(cfg, "ws-acme", plan);
  add_tenant(cfg, "ws-globex", plan);
  cfg.global_gates.model["m-hot"] = bucket(100, 0.001);
  Harness h(cfg);
  Sync s(redis_.port());
  auto with_model = [](const std::string& tenant) {
    AdmitRequest r = req(tenant);
    r.model = "m-hot";
    return r;
  };
  for (int i = 0; i < 2; ++i) {
    AdmitResult a = h.admit(with_model("ws-acme"));
    ASSERT_EQ(a.outcome, Outcome::kAllowed) << a.error;
  }
  for (int i = 0; i < 5; ++i) {
    AdmitResult a = h.admit(with_model("ws-acme"));
    ASSERT_EQ(a.outcome, Outcome::kRefused) << a.error;
    EXPECT_EQ(a.gate, "tenant");
    EXPECT_GT(a.retry_after_ms, 0);
    EXPECT_EQ(find_gate(a, "model"), nullptr);  // not asked
  }
  const std::string markers = "dg:{g:model:m-hot}:a:*";
  EXPECT_EQ(s.keys(markers).size(), 2u);
  EXPECT_NEAR(std::stod(s.str({"HGET", keys::global_bucket("model", "m-hot"), "tk"})), 98, 0.1);
  AdmitResult other = h.admit(with_model("ws-globex"));
  ASSERT_EQ(other.outcome, Outcome::kAllowed) << other.error;
  EXPECT_NEAR(rem(other, "model"), 97, 0.1);
  EXPECT_EQ(s.keys(markers).size(), 3u);
}

TEST_F(AdmissionTest, LongTenantGeneratedRequestIdRoundTrips) {
  config::Config cfg = base_config(redis_.port());
  config::Plan plan;
  plan.quota = config::Quota::monthly(1000, 600);
  std::string tenant(64, 't');
  add_tenant(cfg, tenant, plan);
  Harness h(cfg);
  AdmitResult a = h.admit(req(tenant, 10));
  ASSERT_EQ(a.outcome, Outcome::kAllowed);
  EXPECT_GT(a.request_id.size(), 64u);
  EXPECT_TRUE(valid_request_id(a.request_id));
  SettleResult s = h.settle("", a.request_id, 20);
  EXPECT_TRUE(s.settled) << s.error;
  EXPECT_EQ(s.remaining, 980);
}

TEST_F(AdmissionTest, NoscriptAfterScriptFlushIsTransparent) {
  config::Config cfg = base_config(redis_.port());
  config::Plan plan;
  plan.tenant = bucket(100, 1);
  plan.quota = config::Quota::monthly(1000, 600);
  add_tenant(cfg, "ws-acme", plan);
  Observer obs;
  Harness h(cfg, &obs);
  ASSERT_EQ(h.admit(req("ws-acme")).outcome, Outcome::kAllowed);
  EXPECT_EQ(Sync(redis_.port()).str({"SCRIPT", "FLUSH"}), "OK");
  AdmitResult a = h.admit(req("ws-acme", 5));
  EXPECT_EQ(a.outcome, Outcome::kAllowed) << a.error;
  EXPECT_GE(obs.count("noscript"), 1);
  EXPECT_EQ(Sync(redis_.port()).str({"SCRIPT", "FLUSH"}), "OK");
  SettleResult s = h.settle("", a.request_id, 5);
  EXPECT_TRUE(s.settled) << s.error;
  EXPECT_EQ(Sync(redis_.port()).str({"SCRIPT", "FLUSH"}), "OK");
  EXPECT_FALSE(h.release("", a.request_id).released);
  EXPECT_GE(obs.count("noscript"), 3);
}

TEST_F(AdmissionFaultTest, RedisDownThenBack) {
  config::Config cfg = base_config(redis_.port());
  cfg.redis.timeout_ms = 200;
  config::Plan plan;
  plan.tenant = bucket(100, 1);
  add_tenant(cfg, "ws-acme", plan);
  Observer obs;
  Harness h(cfg, &obs);
  ASSERT_EQ(h.admit(req("ws-acme")).outcome, Outcome::kAllowed);
  EXPECT_TRUE(h.engine().redis_up());

  redis_.stop();
  AdmitResult down = h.admit(req("ws-acme"));
  EXPECT_EQ(down.outcome, Outcome::kUnavailable);
  EXPECT_EQ(down.error.rfind("redis: ", 0), 0u) << down.error;
  EXPECT_TRUE(h.wait_until([&] { return !h.engine().redis_up(); }, milliseconds(2000)));
  // Still answering while down, without waiting for a timeout.
  auto t0 = Clock::now();
  EXPECT_EQ(h.admit(req("ws-acme")).outcome, Outcome::kUnavailable);
  EXPECT_LT(Clock::now() - t0, milliseconds(1000));

  redis_.start();
  Outcome last = Outcome::kUnavailable;
  bool back = h.wait_until(
      [&] {
        last = h.admit(req("ws-acme")).outcome;
        return last == Outcome::kAllowed;
      },
      milliseconds(10000));
  EXPECT_TRUE(back);
  EXPECT_TRUE(h.engine().redis_up());
  std::lock_guard l(obs.mu);
  ASSERT_GE(obs.ups.size(), 3u);
  EXPECT_FALSE(obs.ups[0]);  // initial state
  EXPECT_TRUE(obs.ups[1]);
  EXPECT_TRUE(obs.ups.back());
  EXPECT_GE(obs.round_trips, 2);
}

TEST_F(AdmissionFaultTest, SlowRedisTimesOutThenRecovers) {
  config::Config cfg = base_config(redis_.port());
  cfg.redis.timeout_ms = 100;
  cfg.redis.pool_size = 1;
  config::Plan plan;
  plan.tenant = bucket(100, 1);
  add_tenant(cfg, "ws-acme", plan);
  Observer obs;
  Harness h(cfg, &obs);
  ASSERT_EQ(h.admit(req("ws-acme")).outcome, Outcome::kAllowed);
  // Every client, ours included, waits 1 s for its next command.
  ASSERT_EQ(redis_.cli("CLIENT PAUSE 1000 ALL"), "OK");
  auto t0 = Clock::now();
  AdmitResult r = h.admit(req("ws-acme"));
  auto took = Clock::now() - t0;
  EXPECT_EQ(r.outcome, Outcome::kUnavailable);
  EXPECT_NE(r.error.find("timeout"), std::string::npos) << r.error;
  EXPECT_LT(took, milliseconds(800));
  EXPECT_GE(obs.count("timeout"), 1);
  EXPECT_TRUE(h.wait_until([&] { return h.admit(req("ws-acme")).outcome == Outcome::kAllowed; },
                           milliseconds(5000)));
}

// 16 clients admitting back to back (tenant bucket, quota, lease and a model gate, none
// refilling, so what Redis holds counts what was taken) for run_ms while fault() runs (it must
// end by then: the loop waits for it), then once
// Redis answers again: what Redis holds is exactly what the requests answered 200 took, and
// nothing is left of a request answered 503. Returns the failures' latencies (ms), sorted.
// Without the model gate (model_gate false) an admission is one admit.lua call, so none is
// undone for want of its other part.
std::vector<double> expect_charged_only_for_200(testing::RedisServer& redis, Observer& obs,
                                                int timeout_ms, int run_ms,
                                                std::function<void()> fault,
                                                bool model_gate = true) {
  config::Config cfg = base_config(redis.port());
  cfg.redis.timeout_ms = timeout_ms;
  cfg.redis.pool_size = 2;
  config::Plan plan;
  const double cap = 1e6;
  plan.tenant = bucket(cap, 0);  // no refill: tokens consumed = cap - tk
  plan.quota = config::Quota::monthly(1000000000, 600);
  plan.concurrency = config::Concurrency{1000000, 600};
  add_tenant(cfg, "ws-load", plan);
  if (model_gate) cfg.global_gates.model["m1"] = bucket(cap, 0);
  Harness h(cfg, &obs);

  struct Done {
    Outcome outcome;
    std::string rid;
    double ms;
  };
  std::vector<Done> done;
  int in_flight = 0;
  bool issuing = true;
  int seq = 0;
  std::function<void()> issue = [&] {
    AdmitRequest r = req("ws-load", 10);
    if (model_gate) r.model = "m1";
    r.request_id = "rq-" + std::to_string(seq++);
    auto t0 = Clock::now();
    ++in_flight;
    h.engine().admit(r, [&, rid = r.request_id, t0](AdmitResult res) {
      --in_flight;
      done.push_back(
          {res.outcome, rid, std::chrono::duration<double, std::milli>(Clock::now() - t0).count()});
      if (issuing) issue();
    });
  };
  for (int i = 0; i < 16; ++i) issue();  // 16 clients, each sending its next request at once
  std::thread chaos(fault);
  h.wait_until([] { return false; }, milliseconds(run_ms));
  issuing = false;
  chaos.join();
  EXPECT_TRUE(h.wait_until([&] { return in_flight == 0; }, milliseconds(5000)));

  int allowed = 0;
  std::vector<double> failed_ms;
  for (const auto& d : done) {
    if (d.outcome == Outcome::kAllowed) ++allowed;
    if (d.outcome == Outcome::kUnavailable) failed_ms.push_back(d.ms);
  }
  EXPECT_GT(allowed, 0);
  EXPECT_GE(failed_ms.size(), 16u) << "the fault was not met";
  std::sort(failed_ms.begin(), failed_ms.end());

  // The undos run once Redis answers again: wait until the reservations are those of the 200s.
  Sync s(redis.port());
  auto open_reservations = [&] {
    int n = 0;
    redisReply* windows = s.cmd({"KEYS", keys::reservations("ws-load") + "*"});
    for (size_t i = 0; windows && i < windows->elements; ++i) {
      std::string open = s.str({"HGET", windows->element[i]->str, "#"});
      n += open.empty() ? 0 : std::stoi(open);
    }
    freeReplyObject(windows);
    return n;
  };
  EXPECT_TRUE(h.wait_until([&] { return open_reservations() == allowed; }, milliseconds(10000)));
  // And until no undo is left to send (a global gate's has no reservation to watch).
  h.wait_until([] { return false; }, milliseconds(300));
  auto consumed = [&](const std::string& key) {
    return cap - std::stod(s.str({"HGET", key, "tk"}));
  };
  EXPECT_EQ(consumed(keys::bucket("ws-load", "tenant")), allowed);
  if (model_gate) {
    EXPECT_EQ(consumed(keys::global_bucket("model", "m1")), allowed);
  }
  EXPECT_EQ(s.str({"ZCARD", "dg:{t:ws-load}:leases"}), std::to_string(allowed));
  redisReply* qk = s.cmd({"KEYS", "dg:{t:ws-load}:q:*"});
  EXPECT_TRUE(qk && qk->elements == 1);
  if (qk && qk->elements == 1) {
    EXPECT_EQ(s.str({"GET", std::string(qk->element[0]->str, qk->element[0]->len)}),
              std::to_string(10 * allowed));
  }
  freeReplyObject(qk);
  // As many reservations and leases as requests answered 200, and those are theirs: none is
  // left for a request answered 503.
  auto reservations = s.reservations("ws-load");
  EXPECT_EQ(static_cast<int>(reservations.size()), allowed);
  for (const auto& d : done) {
    if (d.outcome != Outcome::kAllowed) continue;
    EXPECT_EQ(reservations.count(d.rid), 1u) << d.rid;
    EXPECT_FALSE(s.str({"ZSCORE", "dg:{t:ws-load}:leases", d.rid}).empty()) << d.rid;
  }
  std::printf(
      "%d answered 200, %zu answered 503 (p99 %.1f ms, max %.1f ms); %d late replies and %d "
      "lost ones undone\n",
      allowed, failed_ms.size(), failed_ms.empty() ? 0 : failed_ms[failed_ms.size() * 99 / 100],
      failed_ms.empty() ? 0 : failed_ms.back(), obs.count("late"), obs.count("lost"));
  return failed_ms;
}

// Redis stopped (SIGSTOP) for longer than timeout_ms under load, then continued: it runs the
// calls it had already read, after their requests were answered 503 and their connections
// dropped as stalled; their undos find whether they ran. A failure is answered near timeout_ms.
TEST_F(AdmissionFaultTest, StoppedRedisChargesOnlyWhatWasAnswered200) {
  Observer obs;
  auto failed_ms = expect_charged_only_for_200(redis_, obs, 50, 1300, [&] {
    std::this_thread::sleep_for(milliseconds(300));
    redis_.pause();
    std::this_thread::sleep_for(milliseconds(500));
    redis_.resume();
  });
  EXPECT_GE(obs.count("lost"), 1) << "no call was owed a reply: the test did not exercise the undo";
  EXPECT_GE(obs.count("stall"), 1);
  ASSERT_FALSE(failed_ms.empty());
  EXPECT_LT(failed_ms[failed_ms.size() * 99 / 100], 3 * 50 + 100) << "max " << failed_ms.back();
}

// The calls of an admission that Redis executes, counted by Redis (INFO commandstats counts the
// commands a script runs): a lease's ZADD is one per admitted admit.lua call.
int64_t command_calls(Sync& s, const std::string& command) {
  std::string info = s.str({"INFO", "commandstats"});
  const std::string key = "cmdstat_" + command + ":calls=";
  auto at = info.find(key);
  return at == std::string::npos ? 0 : std::stoll(info.substr(at + key.size()));
}

// Stopped for longer than a call's deadline plus the skew allowance (1 s): the first call past
// its deadline drops its connection, the reconnects' setup goes unanswered, and meanwhile every
// admission fails fast: the median failure well inside the 50 ms call timeout it would otherwise
// wait out (about 1 ms here, 2 ms under ASan on a loaded core; the bound is a fifth of it). Once
// Redis continues, the admissions it had read run past their deadline and take nothing (admit.lua's
// code 4), and Redis holds exactly what the requests answered 200 took. No model gate: an admission
// is one call, so none is undone for a failed other part.
TEST_F(AdmissionFaultTest, StoppedPastTheDeadlineRunsNoStaleAdmission) {
  Observer obs;
  Sync s(redis_.port());
  int64_t zadds = 0;
  auto failed_ms = expect_charged_only_for_200(
      redis_, obs, 50, 3500,
      [&] {
        std::this_thread::sleep_for(milliseconds(200));
        redis_.pause();
        std::this_thread::sleep_for(milliseconds(2600));
        redis_.resume();
      },
      false);
  zadds = command_calls(s, "zadd");
  ASSERT_FALSE(failed_ms.empty());
  const double median = failed_ms[failed_ms.size() / 2];
  EXPECT_LT(median, 50.0 / 5) << "p99 " << failed_ms[failed_ms.size() * 99 / 100];
  EXPECT_GE(obs.count("stall"), 2);
  EXPECT_GE(obs.count("fail_fast"), 100);
  // An admission answered 503 took a lease only if Redis ran it before it stopped, its reply
  // not yet sent: one of the 16 in flight then (the undo gave it back). Those Redis read and
  // ran once continued were past their deadline and took nothing; without the deadline they
  // would add to these.
  const int64_t leases = std::stoll(s.str({"ZCARD", "dg:{t:ws-load}:leases"}));
  EXPECT_LE(zadds - leases, 16) << "an admission ran past its deadline and took its lease";
  std::printf(
      "stopped past the deadline: %zu failures (median %.2f ms), %d stalls, %lld leases "
      "taken, %lld ZADDs run\n",
      failed_ms.size(), median, obs.count("stall"), static_cast<long long>(leases),
      static_cast<long long>(zadds));
}

// Redis killed (SIGKILL) under load and restarted from its append-only file (fsync always: a
// call that ran survives even when its reply never left): the replies lost with the connection
// are undone by what the restarted Redis holds.
// Under load for 300 ms, then killed and started again after `down`; returns its counts.
Observer& kill_under_load(testing::RedisServer& redis, Observer& obs, milliseconds down) {
  expect_charged_only_for_200(redis, obs, 200, 1300, [&] {
    std::this_thread::sleep_for(milliseconds(300));
    redis.stop();
    std::this_thread::sleep_for(down);
    redis.start();
  });
  EXPECT_GE(obs.count("lost"), 1) << "no call was in flight when Redis died";
  return obs;
}

TEST(AdmissionKill, KilledRedisChargesOnlyWhatWasAnswered200) {
  testing::RedisServer redis(testing::RedisServer::Durability::kAppendFsyncAlways);
  Observer obs;
  kill_under_load(redis, obs, milliseconds(300));
}

// Killed and restarted with a dataset that takes about a second to load: the undos of the replies
// lost with the connection reach Redis while it answers LOADING (it accepts connections while it
// loads), and are sent again until it runs them; still nothing is charged for a 503.
TEST(AdmissionKill, UndosThatMeetALoadingRedisAreSentAgain) {
  testing::RedisServer redis(testing::RedisServer::Durability::kAppendFsyncAlways);
  {
    // A million keys in another database (the admissions' checks list database 0's keys),
    // written with the append-only file off, then in it by one rewrite.
    Sync s(redis.port());
    auto ok = [&](std::vector<std::string> argv) {
      redisReply* r = s.cmd(std::move(argv));
      ASSERT_TRUE(r && r->type != REDIS_REPLY_ERROR) << (r ? r->str : "no reply");
      freeReplyObject(r);
    };
    ok({"SELECT", "1"});
    ok({"CONFIG", "SET", "appendonly", "no"});
    ok({"EVAL", "for i = 1, 1000000 do redis.call('SET', 'fill:' .. i, 'x') end", "0"});
    ok({"CONFIG", "SET", "appendonly", "yes"});
    auto rewriting = [&] {
      const std::string info = s.str({"INFO", "persistence"});
      return info.find("aof_rewrite_in_progress:0") == std::string::npos ||
             info.find("aof_rewrite_scheduled:0") == std::string::npos;
    };
    for (int i = 0; i < 600 && rewriting(); ++i) std::this_thread::sleep_for(milliseconds(50));
    ASSERT_FALSE(rewriting()) << "the append-only rewrite did not end within 30 s";
  }
  // Restarted at once, so the reconnect back-off (doubled per failed try) stays far shorter than
  // the load.
  Observer obs;
  EXPECT_GE(kill_under_load(redis, obs, milliseconds(20)).count("undo_wait"), 1)
      << "no undo met the loading Redis";
}

// Runs a packed call as the engine would (EVAL of the same text, keys and args) on s.
// Tenant ws-acme with a bucket of 100, a quota of 1000 and 10 leases, and a model gate m1 of 50,
// none refilling, and request rq-1 of 30 tokens through m1: the calls of one admission, run by
// hand on the test's Redis.
struct AcmeCalls {
  explicit AcmeCalls(int port) : cfg(config(port)), tables(cfg), s(port) {
    r.model = "m1";
    r.request_id = "rq-1";
  }
  static config::Config config(int port) {
    config::Config cfg = base_config(port);
    config::Plan plan;
    plan.tenant = bucket(100, 0);
    plan.quota = config::Quota::monthly(1000, 600);
    plan.concurrency = config::Concurrency{10, 600};
    add_tenant(cfg, "ws-acme", plan);
    cfg.global_gates.model["m1"] = bucket(50, 0);
    return cfg;
  }
  config::Config cfg;
  Tables tables;
  std::mt19937_64 rng{7};
  Sync s;
  AdmitRequest r = req("ws-acme", 30);
};

// One gates.lua call on the model gate m1 of holder with turn t (its own wait t.book_ms), for
// request rq-<n> of 1 token; the reply, for the caller to free.
redisReply* gates_call(const Tables& tables, std::mt19937_64& rng, Sync& s, int& n,
                       std::string_view holder, const Turn& t) {
  AdmitRequest r = req("ws-acme", 1);
  r.model = "m1";
  r.request_id = "rq-" + std::to_string(++n);
  Prepared p;
  EXPECT_EQ(prepare(tables, r, rng, p), "");
  p.holder = holder;
  p.turn = t;
  p.left_ms_s = "60000";
  p.book_ms_s = std::to_string(t.book_ms);
  return run_call(s, GatesCall(p, 0));
}

// The waiters of other workers and daemons on a global gate come first (lua/lib_waiters.lua):
// gates.lua lets a call take only what the bucket holds beyond the needs of the registered first
// waiters ahead of it (a higher band, or its band's earlier turns), a request that does not wait
// comes after every waiter, an admitted first waiter hands its worker's place to the next (or
// takes it out), and an entry past its time counts for nothing and goes.
TEST_F(AdmissionTest, GatesLeaveTheWaitersOfOtherWorkersWhatTheyNeedFirst) {
  config::Config cfg = AcmeCalls::config(redis_.port());
  cfg.global_gates.model["m1"] = bucket(2, 0);  // no refill: the test sets the level
  Tables tables(cfg);
  std::mt19937_64 rng(7);
  Sync s(redis_.port());
  const std::string bucket_key = keys::global_bucket("model", "m1");
  const std::string waiters = keys::global_waiters("model", "m1");
  struct Reply {
    int64_t code = -1;
    std::string gate, last;  // last: a first waiter's next_ms (before the booked token's time)
  };
  int n = 0;
  auto call = [&](std::string_view holder, const Turn& t) {
    redisReply* x = gates_call(tables, rng, s, n, holder, t);
    Reply out;
    if (x && x->type == REDIS_REPLY_ARRAY && x->elements >= 3) {
      out.code = x->element[0]->integer;
      out.gate = x->element[1]->str;
      const redisReply* l = x->element[x->elements - (t.waits ? 2 : 1)];
      out.last = l->type == REDIS_REPLY_INTEGER ? std::to_string(l->integer) : l->str;
    }
    freeReplyObject(x);
    return out;
  };
  auto waits = [](int band, std::string_view head = {}, int next_band = -1) {
    Turn t;
    t.waits = true;
    t.band = band;
    t.head = head;
    t.next_band = next_band;
    return t;
  };
  auto level = [&](const char* tk) { s.str({"HSET", bucket_key, "tk", tk}); };
  EXPECT_EQ(call("A", waits(1)).code, 1);  // 2 -> 1: nobody waits, nothing written
  EXPECT_EQ(call("A", waits(1)).code, 1);  // 1 -> 0
  EXPECT_EQ(s.str({"EXISTS", waiters}), "0");
  EXPECT_EQ(call("A", waits(1)).code, 0);  // refused: worker A's place, band 1
  EXPECT_EQ(call("B", waits(0)).code, 0);  // worker B's, band 0
  EXPECT_EQ(s.str({"HLEN", waiters}), "2");
  std::vector<std::string> fields;
  if (redisReply* x = s.cmd({"HKEYS", waiters})) {
    for (size_t i = 0; i < x->elements; ++i) fields.emplace_back(x->element[i]->str);
    freeReplyObject(x);
  }
  std::sort(fields.begin(), fields.end());
  EXPECT_EQ(fields, (std::vector<std::string>{"A", "B"}));
  level("1");
  // One token: B's band 0 goes first, so neither A's first waiter nor a request that does not
  // wait may take it.
  EXPECT_EQ(call("A", waits(1, "model", 1)).code, 0);
  EXPECT_EQ(call("C", Turn{}).code, 0);
  const Reply b = call("B", waits(0, "model"));  // B has no next waiter: its place goes
  EXPECT_EQ(b.code, 1);
  EXPECT_EQ(b.last, "-1");
  EXPECT_EQ(s.str({"HEXISTS", waiters, "B"}), "0");
  level("1");
  // A's next waiter takes its place; A has two tenants in its band, so its next turn begins half
  // way from its last one's beginning to now: it takes two turns while a worker of one takes one.
  auto since = [&](const char* holder) {
    const std::string v = s.str({"HGET", waiters, holder});
    return std::stoll(v.substr(v.find(' ') + 1));
  };
  const int64_t since_before = since("A");
  Turn two = waits(1, "model", 1);
  two.next_tenants = 2;
  const Reply a = call("A", two);
  EXPECT_EQ(a.code, 1);
  EXPECT_NE(a.last, "-1");
  const int64_t now_us = static_cast<int64_t>(s.time_s()) * 1000000;
  const int64_t since_after = since("A");
  EXPECT_GT(since_after, since_before);
  EXPECT_LT(since_after - since_before, (now_us + 1000000 - since_before) / 2 + 1000);
  // Two tokens: one for A's next waiter, one beyond: a request that does not wait takes it. An
  // entry past its time holds nothing back and goes.
  s.str({"HSET", waiters, "Z", "0 1 1 1"});
  level("2");
  EXPECT_EQ(call("C", Turn{}).code, 1);
  EXPECT_EQ(call("C", Turn{}).code, 0);
  EXPECT_EQ(s.str({"HEXISTS", waiters, "Z"}), "0");
  // A band-0 request comes to worker A, whose place is band 1's: it takes A's place and A keeps
  // its band-1 turn for when it is back to band 1, rather than going to the end of that band.
  const int64_t band1_since = since("A");
  level("0");
  EXPECT_EQ(call("A", waits(0)).code, 0);
  EXPECT_EQ(s.str({"HGET", waiters, "A"}).substr(0, 2), "0 ");
  EXPECT_EQ(since("A:1"), band1_since);
  level("1");
  EXPECT_EQ(call("A", waits(0, "model", 1)).code, 1);
  EXPECT_EQ(s.str({"HGET", waiters, "A"}).substr(0, 2), "1 ");
  EXPECT_EQ(since("A"), band1_since);
  EXPECT_EQ(s.str({"HEXISTS", waiters, "A:1"}), "0");
}

// A call that may wait, that no registered waiter is ahead of, refused only because the gate's
// next token has not come yet, books that token (lua/gates.lua): admitted with the time the token
// exists, the bucket below zero by its cost, so that every later call, of any band and whether it
// waits or not, finds it gone and cannot take it. No more bookings than one per other registered
// worker beyond the first (a higher band waits at most those tokens), none past the request's own
// wait (book_ms), none while a registered waiter is ahead of the caller, none for a newcomer
// alone on the gate. The levels are set here, on Redis's clock.
TEST_F(AdmissionTest, AWaiterNobodyIsAheadOfBooksTheGatesNextToken) {
  config::Config cfg = AcmeCalls::config(redis_.port());
  cfg.global_gates.model["m1"] = bucket(1, 1);  // a token a second
  Tables tables(cfg);
  std::mt19937_64 rng(7);
  Sync s(redis_.port());
  const std::string bucket_key = keys::global_bucket("model", "m1");
  const std::string waiters = keys::global_waiters("model", "m1");
  struct Reply {
    int64_t code = -1, retry_ms = -1, due_us = -1;
  };
  int n = 0;
  auto call = [&](std::string_view holder, const Turn& t) {
    redisReply* x = gates_call(tables, rng, s, n, holder, t);
    Reply out;
    if (x && x->type == REDIS_REPLY_ARRAY && x->elements >= 3) {
      out.code = x->element[0]->integer;
      out.retry_ms = x->element[2]->integer;
      if (out.code == 1 && t.waits) out.due_us = x->element[x->elements - 1]->integer;
    }
    freeReplyObject(x);
    return out;
  };
  auto waits = [](int band, int64_t book_ms, std::string_view head = {}) {
    Turn t;
    t.waits = true;
    t.band = band;
    t.head = head;
    t.book_ms = book_ms;
    return t;
  };
  // The bucket empty at Redis's now: its next token comes in a second.
  auto empty_now = [&] {
    redisReply* t = s.cmd({"TIME"});
    ASSERT_NE(t, nullptr);
    const std::string ts =
        std::to_string(std::stoll(t->element[0]->str) * 1000000 + std::stoll(t->element[1]->str));
    freeReplyObject(t);
    s.str({"HSET", bucket_key, "tk", "0", "ts", ts, "ex", "9999999999"});
  };
  auto level = [&] { return std::stod(s.str({"HGET", bucket_key, "tk"})); };
  // Another worker waits, in band 2: behind every call here, but the gate is contended.
  s.str({"HSET", waiters, "W", "2 1 1 9999999999999"});
  empty_now();
  const Reply a = call("A", waits(1, 5000));
  EXPECT_EQ(a.code, 1);
  EXPECT_GT(a.due_us, 900000);
  EXPECT_LE(a.due_us, 1000000);
  EXPECT_LT(level(), 0);                             // the token is gone to everyone else
  EXPECT_EQ(s.str({"HEXISTS", waiters, "A"}), "0");  // admitted: no place among the waiters
  // One booking per other worker beyond the first: B (band 0) books the token after A's, C no
  // third; C and a request that does not wait come after both.
  const Reply b = call("B", waits(0, 5000));
  EXPECT_EQ(b.code, 1);
  EXPECT_GT(b.due_us, 1900000);
  const Reply c = call("C", waits(0, 5000));
  EXPECT_EQ(c.code, 0);
  EXPECT_GT(c.retry_ms, 2900);
  EXPECT_EQ(call("N", Turn{}).code, 0);
  // C's place (band 0) is ahead of A's next call: no booking for A, although the bucket is at 0.
  empty_now();
  EXPECT_EQ(call("A", waits(1, 5000)).code, 0);
  // C, first, books none past its own wait, then books within it.
  EXPECT_EQ(call("C", waits(0, 500, "model")).code, 0);
  const Reply c2 = call("C", waits(0, 5000, "model"));
  EXPECT_EQ(c2.code, 1);
  EXPECT_GT(c2.due_us, 900000);
  // Nobody else waits: a newcomer queues as before, and a request that does not wait never books.
  s.str({"DEL", waiters});
  empty_now();
  EXPECT_EQ(call("D", waits(1, 5000)).code, 0);
  s.str({"DEL", waiters});
  s.str({"HSET", waiters, "W", "2 1 1 9999999999999"});
  Turn no_wait;
  no_wait.book_ms = 5000;
  EXPECT_EQ(call("N", no_wait).code, 0);
  EXPECT_EQ(level(), 0);
}

// A call Redis runs past the deadline it carries (the daemon answered it failed: a stopped
// Redis ran it from its buffer once continued) changes nothing and says so with its own code:
// admit.lua and gates.lua 4, charge.lua 3. A deadline a second ahead takes as usual.
TEST_F(AdmissionTest, ACallPastItsDeadlineChangesNothing) {
  AcmeCalls a(redis_.port());
  auto& [cfg, tables, rng, s, r] = a;
  Prepared p;
  ASSERT_EQ(prepare(tables, r, rng, p), "");
  const int64_t now_ms =
      std::chrono::duration_cast<milliseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count();
  p.deadline = std::to_string(now_ms - 1000);
  EXPECT_EQ(code_of(run_call(s, AdmitCall(p))), 4);
  EXPECT_EQ(code_of(run_call(s, GatesCall(p, 0))), 4);
  EXPECT_TRUE(s.dump().empty());
  // In time: admitted; then a stream charge past its deadline leaves every key as it was.
  p.deadline = std::to_string(now_ms + 1000);
  EXPECT_EQ(code_of(run_call(s, AdmitCall(p))), 1);
  const auto before = s.dump();
  Correction c;
  ASSERT_EQ(prepare_correction(tables, "ws-acme", "rq-1", 5, "", "", "", c), "");
  c.deadline = std::to_string(now_ms - 1000);
  EXPECT_EQ(code_of(run_call(s, ChargeCall(c))), 3);
  EXPECT_EQ(s.dump(), before);
  c.deadline = std::to_string(now_ms + 1000);
  EXPECT_EQ(code_of(run_call(s, ChargeCall(c))), 1);
  EXPECT_NE(s.dump(), before);
}

// The model_tokens part of a stream charge (correct_gates.lua) past its deadline changes nothing
// either (code 3): run late, after the proxy sent the charge again, it would take its tokens
// twice. A settle carries no deadline (it is safe to run again) and corrects as usual.
TEST_F(AdmissionTest, AModelTokensChargePastItsDeadlineChangesNothing) {
  config::Config cfg = AcmeCalls::config(redis_.port());
  cfg.global_gates.model_tokens["m1"] = bucket(1000, 0);
  Tables tables(cfg);
  std::mt19937_64 rng(7);
  Sync s(redis_.port());
  AdmitRequest r = req("ws-acme", 30);
  r.model = "m1";
  r.request_id = "rq-1";
  Prepared p;
  ASSERT_EQ(prepare(tables, r, rng, p), "");
  EXPECT_EQ(code_of(run_call(s, AdmitCall(p))), 1);
  for (int i = 0; i < p.ng; ++i) EXPECT_EQ(code_of(run_call(s, GatesCall(p, i))), 1);
  const std::string taken = keys::global_taken("model_tokens", "m1", "rq-1");
  ASSERT_EQ(s.str({"GET", taken}), "30");
  const int64_t now_ms =
      std::chrono::duration_cast<milliseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count();
  Correction c;
  ASSERT_EQ(prepare_correction(tables, "ws-acme", "rq-1", 5, "", "", "m1", c), "");
  ASSERT_NE(c.model, nullptr);
  const auto before = s.dump();
  c.deadline = std::to_string(now_ms - 1000);
  EXPECT_EQ(code_of(run_call(s, CorrectGatesCall(c, false))), 3);
  EXPECT_EQ(s.dump(), before);
  c.deadline = std::to_string(now_ms + 1000);
  EXPECT_EQ(code_of(run_call(s, CorrectGatesCall(c, false))), 1);
  EXPECT_EQ(s.str({"GET", taken}), "35");
  Correction settle;
  ASSERT_EQ(prepare_correction(tables, "ws-acme", "rq-1", 40, "", "", "m1", settle), "");
  EXPECT_EQ(code_of(run_call(s, CorrectGatesCall(settle, true))), 1);
  EXPECT_EQ(s.str({"EXISTS", taken}), "0");
}

// The undo of a call whose reply was lost learns from Redis whether the call ran: if it did,
// everything it took goes back (once, however often the undo is sent); if not, the call is
// cancelled and refuses when it runs later, writing nothing.
TEST_F(AdmissionTest, AnUndoFindsOutWhetherTheCallRan) {
  AcmeCalls a(redis_.port());
  auto& [cfg, tables, rng, s, r] = a;

  // Ran, then undone twice: all back, once.
  Prepared ran;
  ASSERT_EQ(prepare(tables, r, rng, ran), "");
  EXPECT_EQ(code_of(run_call(s, AdmitCall(ran))), 1);
  EXPECT_EQ(code_of(run_call(s, GatesCall(ran, 0))), 1);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(code_of(run_call(s, RefundCall(ran, Undo{}))), i == 0 ? 1 : 0);
    EXPECT_EQ(code_of(run_call(s, UngatesCall(ran, 0, {}))), i == 0 ? 1 : 0);
  }
  EXPECT_EQ(s.str({"HGET", keys::bucket("ws-acme", "tenant"), "tk"}), "100");
  EXPECT_EQ(s.str({"HGET", keys::global_bucket("model", "m1"), "tk"}), "50");
  EXPECT_TRUE(s.reservations("ws-acme").empty());
  EXPECT_EQ(s.str({"ZCARD", keys::leases("ws-acme")}), "0");
  redisReply* qk = s.cmd({"KEYS", "dg:{t:ws-acme}:q:*"});
  ASSERT_TRUE(qk && qk->elements == 1);
  EXPECT_EQ(s.str({"GET", std::string(qk->element[0]->str, qk->element[0]->len)}), "0");
  freeReplyObject(qk);
  // The second refund found no reservation of its attempt: it left a cancellation only, in the
  // current reservation window and the next.
  std::string cancellations;
  for (const auto& [k, v] : s.dump())
    if (k.starts_with(keys::reservations("ws-acme"))) cancellations += v;
  EXPECT_EQ(cancellations, "hash:x:" + ran.attempt + "=1;hash:x:" + ran.attempt + "=1;");

  // Undone before it ran (the call still sat in a stopped Redis's buffer): it refuses later.
  freeReplyObject(s.cmd({"FLUSHALL"}));
  Prepared late;
  r.request_id = "rq-2";
  ASSERT_EQ(prepare(tables, r, rng, late), "");
  EXPECT_EQ(code_of(run_call(s, RefundCall(late, Undo{}))), 0);
  EXPECT_EQ(code_of(run_call(s, UngatesCall(late, 0, {}))), 0);
  EXPECT_EQ(code_of(run_call(s, AdmitCall(late))), 3);
  EXPECT_EQ(code_of(run_call(s, GatesCall(late, 0))), 3);
  for (const auto& [k, v] : s.dump())
    EXPECT_TRUE(k.starts_with(keys::reservations("ws-acme")) || k == late.attempt_keys[0])
        << k << " = " << v;
  EXPECT_TRUE(s.reservations("ws-acme").empty());

  // Another attempt with the same request_id (a client's retry) is not the cancelled one.
  Prepared retry;
  ASSERT_EQ(prepare(tables, r, rng, retry), "");
  EXPECT_NE(retry.attempt, late.attempt);
  EXPECT_EQ(code_of(run_call(s, AdmitCall(retry))), 1);
  EXPECT_EQ(code_of(run_call(s, GatesCall(retry, 0))), 1);

  // An id the engine generated names its call: its reservation holds no attempt, its undo finds
  // it all the same, and a client's call that reuses the id is not taken for it.
  freeReplyObject(s.cmd({"FLUSHALL"}));
  r.request_id.clear();
  Prepared gen;
  ASSERT_EQ(prepare(tables, r, rng, gen), "");
  ASSERT_TRUE(gen.fresh);
  EXPECT_EQ(code_of(run_call(s, AdmitCall(gen))), 1);
  EXPECT_EQ(s.reservations("ws-acme").at(gen.rid).substr(0, 5), "- 30 ");
  // The same call delivered twice is admitted once: the id is looked up in its window even
  // when the engine made it.
  EXPECT_EQ(code_of(run_call(s, AdmitCall(gen))), 2);
  Prepared reuse;
  r.request_id = gen.rid;
  ASSERT_EQ(prepare(tables, r, rng, reuse), "");
  ASSERT_FALSE(reuse.fresh);
  EXPECT_EQ(code_of(run_call(s, AdmitCall(reuse))), 2);  // in use
  EXPECT_EQ(code_of(run_call(s, RefundCall(reuse, Undo{}))), 0);
  EXPECT_EQ(s.reservations("ws-acme").count(gen.rid), 1u);
  EXPECT_EQ(code_of(run_call(s, RefundCall(gen, Undo{}))), 1);
  EXPECT_TRUE(s.reservations("ws-acme").empty());

  // An engine-generated id's call undone before it ran: the cancellation is the id's field
  // itself ("x"), in the current window and the next; the call refuses later, and a client's
  // call that reuses the id is not taken for the cancelled one.
  freeReplyObject(s.cmd({"FLUSHALL"}));
  r.request_id.clear();
  Prepared gen_late;
  ASSERT_EQ(prepare(tables, r, rng, gen_late), "");
  ASSERT_TRUE(gen_late.fresh);
  EXPECT_EQ(code_of(run_call(s, RefundCall(gen_late, Undo{}))), 0);
  EXPECT_EQ(code_of(run_call(s, RefundCall(gen_late, Undo{}))), 0);
  std::string marks;
  for (const auto& [k, v] : s.dump())
    if (k.starts_with(keys::reservations("ws-acme"))) marks += v;
  EXPECT_EQ(marks, "hash:" + gen_late.rid + "=x;hash:" + gen_late.rid + "=x;");
  EXPECT_EQ(code_of(run_call(s, AdmitCall(gen_late))), 3);
  EXPECT_TRUE(s.reservations("ws-acme").empty());
  Prepared reuse_late;
  r.request_id = gen_late.rid;
  ASSERT_EQ(prepare(tables, r, rng, reuse_late), "");
  ASSERT_FALSE(reuse_late.fresh);
  EXPECT_EQ(code_of(run_call(s, AdmitCall(reuse_late))), 1);
  EXPECT_EQ(s.reservations("ws-acme").count(gen_late.rid), 1u);
  EXPECT_EQ(code_of(run_call(s, RefundCall(reuse_late, Undo{}))), 1);
  EXPECT_TRUE(s.reservations("ws-acme").empty());
}

// An idle bucket goes away once it would be full again, and not much later: its key lives
// between capacity/refill (+1 s) and a quarter more. The expiry moves only when less than that
// is left, so most admissions write the bucket without an EXPIRE.
TEST_F(AdmissionTest, IdleBucketsExpireOnceFullAgain) {
  config::Config cfg = base_config(redis_.port());
  config::Plan plan;
  plan.tenant = bucket(400, 2);  // full again 200 s after a take: idle_s = 201
  add_tenant(cfg, "ws-acme", plan);
  Harness h(cfg);
  Sync s(redis_.port());
  const std::string key = keys::bucket("ws-acme", "tenant");
  ASSERT_EQ(h.admit(req("ws-acme", 0)).outcome, Outcome::kAllowed);
  const int64_t ttl = std::stoll(s.str({"TTL", key}));
  EXPECT_GE(ttl, 200);
  EXPECT_LE(ttl, 201 + 51);
  const std::string ex = s.str({"HGET", key, "ex"});
  ASSERT_EQ(h.admit(req("ws-acme", 0)).outcome, Outcome::kAllowed);
  EXPECT_EQ(s.str({"HGET", key, "ex"}), ex);  // plenty left: not moved
  // Less than idle_s left (as if the last move was long ago): the next take moves it.
  const int64_t soon = std::stoll(ex) - 100;
  s.str({"HSET", key, "ex", std::to_string(soon)});
  s.str({"EXPIREAT", key, std::to_string(soon)});
  ASSERT_EQ(h.admit(req("ws-acme", 0)).outcome, Outcome::kAllowed);
  EXPECT_GT(std::stoll(s.str({"HGET", key, "ex"})), soon);
  EXPECT_GE(std::stoll(s.str({"TTL", key})), 200);
}

// Redis TIME's seconds; 0 when it did not answer.
int64_t redis_time_s(Sync& s) {
  redisReply* t = s.cmd({"TIME"});
  const int64_t now = t && t->elements == 2 ? std::stoll(t->element[0]->str) : 0;
  freeReplyObject(t);
  return now;
}

// A plan's quota_timezone: the engine declares the months of that zone, whose bounds the scripts
// take as given. Bounds placed around Redis TIME (time alignment) show the script picks the
// month they say and sets its counter to expire a month's length after its end; a Berlin plan's
// admission then charges the Berlin month, whose counter outlives its local month end.
TEST_F(AdmissionTest, QuotaMonthsOfThePlansTimeZone) {
  config::Config cfg = base_config(redis_.port());
  config::Plan plan;
  plan.quota = config::Quota::monthly(1000, 600);
  plan.quota_timezone = "Europe/Berlin";
  add_tenant(cfg, "ws-de", plan);
  Tables tables(cfg);
  std::mt19937_64 rng(7);
  Sync s(redis_.port());
  const int64_t now = redis_time_s(s);
  ASSERT_GT(now, 0);
  const TenantInfo& ti = tables.tenants.at("ws-de");
  ASSERT_NE(ti.zone, nullptr);
  auto admit_in = [&](const keys::Months& m) {
    Prepared p;
    EXPECT_EQ(prepare(tables, req("ws-de", 30), rng, p), "");
    const keys::Months* periods[] = {&m};
    p.time_keys.build(ti.quota_prefix, ti.reservations_prefix, ti.res_ttl_s, ti.res_ttl, now,
                      periods);
    return code_of(run_call(s, AdmitCall(p)));
  };
  auto month = [](std::string name, int64_t start, int64_t end) {
    return keys::Month{std::move(name), std::to_string(start), std::to_string(end), start, end};
  };
  // Redis TIME just past the current month's end: the next month's counter takes it.
  ASSERT_EQ(admit_in({month("m1", now - 300, now - 200), month("m2", now - 200, now - 5),
                      month("m3", now - 5, now + 1000)}),
            1);
  EXPECT_EQ(s.str({"GET", keys::quota("ws-de", "m3")}), "30");
  EXPECT_EQ(s.str({"EXPIRETIME", keys::quota("ws-de", "m3")}), std::to_string(now + 1000 + 1005));
  // Just before the current month begins: the previous month's.
  ASSERT_EQ(admit_in({month("m4", now - 300, now + 5), month("m5", now + 5, now + 200),
                      month("m6", now + 200, now + 300)}),
            1);
  EXPECT_EQ(s.str({"GET", keys::quota("ws-de", "m4")}), "30");
  EXPECT_EQ(s.str({"EXISTS", keys::quota("ws-de", "m5")}), "0");
  // The engine's own declaration for the plan: Berlin's months, a counter expiring a month's
  // length after Berlin's month end (an hour or two before UTC's).
  const keys::Months berlin = keys::months_around(*ti.zone, now);
  Harness h(cfg);
  ASSERT_EQ(h.admit(req("ws-de", 40)).outcome, Outcome::kAllowed);
  EXPECT_EQ(s.str({"GET", keys::quota("ws-de", berlin.cur.name)}), "40");
  EXPECT_EQ(s.str({"EXPIRETIME", keys::quota("ws-de", berlin.cur.name)}),
            std::to_string(berlin.cur.end + (berlin.cur.end - berlin.cur.start)));
  EXPECT_NE(berlin.cur.end, keys::month_of(now).end);
}

// The quota month is Redis TIME's, among the three the gateway declares around its clock: a
// gateway a month ahead still charges Redis's month (its "previous" month); one further off, or
// off by more than a reservation window, makes the call fail with an error that says so, and
// nothing is written.
TEST_F(AdmissionTest, RedisTimePicksAmongTheDeclaredMonthsAndWindows) {
  config::Config cfg = base_config(redis_.port());
  config::Plan plan;
  plan.tenant = bucket(100, 0);
  plan.quota = config::Quota::monthly(1000, 600);
  add_tenant(cfg, "ws-acme", plan);
  Tables tables(cfg);
  std::mt19937_64 rng(7);
  Sync s(redis_.port());
  const int64_t now = redis_time_s(s);
  ASSERT_GT(now, 0);
  const keys::Month redis_month = keys::month_of(now);
  const TenantInfo& ti = tables.tenants.at("ws-acme");
  auto admit_with = [&](int64_t window_clock, int64_t month_clock) {
    Prepared p;
    EXPECT_EQ(prepare(tables, req("ws-acme", 30), rng, p), "");
    const keys::Months m = keys::months_around(month_clock);
    const keys::Months* periods[] = {&m};
    p.time_keys.build(ti.quota_prefix, ti.reservations_prefix, ti.res_ttl_s, ti.res_ttl,
                      window_clock, periods);
    return run_call(s, AdmitCall(p));
  };
  auto error_of = [](redisReply* r) {
    std::string e = r && r->type == REDIS_REPLY_ERROR ? std::string(r->str, r->len) : "<none>";
    freeReplyObject(r);
    return e;
  };
  // A month ahead: Redis's month is the declared previous one.
  EXPECT_EQ(code_of(admit_with(now, keys::months_around(now).next.start + 86400)), 1);
  EXPECT_EQ(s.str({"GET", keys::quota("ws-acme", redis_month.name)}), "30");
  auto before = s.dump();
  // Three months off (1999-01): no declared month is Redis's.
  EXPECT_EQ(error_of(admit_with(now, 915148800)).rfind("ERR clock:", 0), 0u);
  // Three reservation windows off.
  EXPECT_EQ(error_of(admit_with(now + 3 * 600, now)).rfind("ERR clock:", 0), 0u);
  EXPECT_EQ(s.dump(), before);
  // One window off either way is within reach.
  EXPECT_EQ(code_of(admit_with(now + 600, now)), 1);
  EXPECT_EQ(code_of(admit_with(now - 600, now)), 1);
}

// Redis's clock and the daemon's may be up to a minute apart, whatever reservation_ttl_s is: a
// call names its quota month and reservation windows by Redis's clock (the daemon's plus the
// offset measured at connect), not the daemon's. With a 5 s reservation TTL the declared windows
// reach only 10 s around the clock they are built on; the daemon here runs 59 s off Redis either
// way, and admits, charges and settles.
TEST_F(AdmissionTest, ClocksAMinuteApartWhateverTheReservationTtl) {
  struct Skew {
    explicit Skew(int64_t ms) { wall_skew_ms = ms; }
    ~Skew() { wall_skew_ms = 0; }
  };
  config::Config cfg = base_config(redis_.port());
  config::Plan plan;
  plan.quota = config::Quota::monthly(1000, 5);
  add_tenant(cfg, "ws-acme", plan);
  for (int64_t skew : {int64_t{-59000}, int64_t{59000}}) {
    SCOPED_TRACE("daemon clock off by " + std::to_string(skew) + " ms");
    Skew off(skew);
    Harness h(cfg);
    AdmitResult a = h.admit(req("ws-acme", 100));
    ASSERT_EQ(a.outcome, Outcome::kAllowed) << a.error;
    ChargeResult c = h.charge(ChargeRequest{"ws-acme", a.request_id, 10, {}, {}, {}});
    ASSERT_EQ(c.outcome, Outcome::kAllowed) << c.error;
    SettleResult st = h.settle("ws-acme", a.request_id, 40);
    ASSERT_EQ(st.outcome, Outcome::kAllowed) << st.error;
    EXPECT_TRUE(st.settled) << st.detail;
  }
  const std::time_t now = Sync(redis_.port()).time_s();
  EXPECT_EQ(Sync(redis_.port()).str({"GET", keys::quota("ws-acme", keys::month_of(now).name)}),
            "80");
}

// The months the gateway declares, checked against plain year/month arithmetic over 1970..2200:
// consecutive, each the one after the other, and the clock inside the current one.
TEST(Months, AroundAnyDayAreTheThreeConsecutiveMonths) {
  namespace chr = std::chrono;
  for (int64_t day = 0; day < 84000; day += 7) {
    const int64_t t = day * 86400 + 86399;
    const keys::Months m = keys::months_around(t);
    EXPECT_LE(m.cur.start, t);
    EXPECT_LT(t, m.cur.end);
    EXPECT_EQ(m.prev.end, m.cur.start);
    EXPECT_EQ(m.cur.end, m.next.start);
    auto index = [](const std::string& name) {  // "YYYY-MM" as months since year 0
      return std::stoi(name.substr(0, 4)) * 12 + std::stoi(name.substr(5, 2)) - 1;
    };
    EXPECT_EQ(index(m.prev.name) + 1, index(m.cur.name)) << day;
    EXPECT_EQ(index(m.cur.name) + 1, index(m.next.name)) << day;
    chr::year_month_day ymd{chr::sys_days(chr::days(day))};
    EXPECT_EQ(index(m.cur.name),
              static_cast<int>(ymd.year()) * 12 + static_cast<int>(unsigned(ymd.month())) - 1);
  }
}

// lib_bucket.lua's bucket_read and bucket_wait_ms (the ramp's math is inside bucket_read) as
// admit.lua embeds them, for a test script to call at a chosen time.
std::string bucket_read_text() {
  const std::string& text = admit_script_text();
  const auto b = text.find("local function bucket_read");
  const auto e = text.find("local function refusal_note");
  EXPECT_NE(b, std::string::npos);
  EXPECT_NE(e, std::string::npos);
  return b == std::string::npos || e == std::string::npos ? std::string() : text.substr(b, e - b);
}

// The engine reports a bucket's reset (whole seconds until full) from its own arithmetic; it must
// be the second at which the scripts' refill (lib_bucket.lua's bucket_read, run here on the
// stored state at a chosen time) first reaches the capacity, and the value must be what is stored.
TEST_F(AdmissionTest, BucketResetMatchesTheLuaRefill) {
  // KEYS[1] bucket; ARGV: capacity, rate, seconds after the stored timestamp.
  std::string script = bucket_read_text() + R"(
local ts = tonumber(redis.call('HGET', KEYS[1], 'ts'))
local b = bucket_read(KEYS[1], tonumber(ARGV[1]), tonumber(ARGV[2]), 0, ts + ARGV[3] * 1000000)
return string.format('%.17g', b[5]))";  // b[5]: the level now
  struct Case {
    double cap, rate;
    int admits;
  };
  const Case cases[] = {{5, 1, 5}, {20, 5, 7}, {6, 2, 1}, {2, 0.5, 2}, {3, 0.7, 3}, {10, 0.3, 4}};
  config::Config cfg = base_config(redis_.port());
  for (size_t i = 0; i < std::size(cases); ++i) {
    config::Plan plan;
    plan.tenant = bucket(cases[i].cap, cases[i].rate);
    add_tenant(cfg, "t" + std::to_string(i), plan);
  }
  Harness h(cfg);
  Sync s(redis_.port());
  for (size_t i = 0; i < std::size(cases); ++i) {
    const Case& c = cases[i];
    std::string tenant = "t" + std::to_string(i);
    SCOPED_TRACE(tenant);
    AdmitResult r;
    for (int k = 0; k < c.admits; ++k) r = h.admit(req(tenant));
    ASSERT_EQ(r.outcome, Outcome::kAllowed) << r.error;
    const Remaining* t = find_gate(r, "tenant");
    ASSERT_NE(t, nullptr);
    std::string key = keys::bucket(tenant, "tenant");
    EXPECT_EQ(t->value, std::stod(s.str({"HGET", key, "tk"})));
    EXPECT_EQ(t->window_s, c.cap / c.rate);
    ASSERT_GT(t->reset_s, 0);
    auto level_after = [&](int64_t seconds) {
      return std::stod(s.str({"EVAL", script, "1", key, std::to_string(c.cap),
                              std::to_string(c.rate), std::to_string(seconds)}));
    };
    EXPECT_EQ(level_after(t->reset_s), c.cap);
    EXPECT_LT(level_after(t->reset_s - 1), c.cap);
  }
}

// ---- warm-up (lua/lib_bucket.lua): a new bucket ramps from a third of its capacity and refill
// to all of them over warmup_s ----

config::Bucket warm_bucket(double cap, double rate, double warmup_s) {
  config::Bucket b{cap, rate};
  b.warmup_s = warmup_s;
  return b;
}

// Tokens a bucket of rate R and warm-up W gains from age a0 to a1: the integral of R/3 +
// (2R/3)·a/W up to W, of R after, from its antiderivative (the script integrates otherwise).
double ramp_integral(double rate, double w, double a0, double a1) {
  auto f = [&](double a) {
    if (a <= w) return rate * a / 3 + rate * a * a / (3 * w);
    return 2 * rate * w / 3 + rate * (a - w);
  };
  return f(a1) - f(a0);
}

// Seconds after age a until the ramp's integral from a reaches need, by bisection.
double ramp_wait(double rate, double w, double a, double need) {
  double lo = 0, hi = 1;
  while (ramp_integral(rate, w, a, a + hi) < need) hi *= 2;
  for (int i = 0; i < 200; ++i) {
    const double mid = (lo + hi) / 2;
    (ramp_integral(rate, w, a, a + mid) < need ? lo : hi) = mid;
  }
  return hi;
}

// Redis TIME in microseconds.
int64_t time_us(Sync& s) {
  redisReply* r = s.cmd({"TIME"});
  int64_t us = std::stoll(r->element[0]->str) * 1000000 + std::stoll(r->element[1]->str);
  freeReplyObject(r);
  return us;
}

// "<sec><usec, 6 digits>", the text of a bucket's ts and c.
std::string us_text(int64_t us) {
  char buf[32];
  snprintf(buf, sizeof buf, "%lld%06lld", static_cast<long long>(us / 1000000),
           static_cast<long long>(us % 1000000));
  return buf;
}

// Requests admitted in a row (stopping at the first refusal, at most `limit`).
int admitted_in_a_row(Harness& h, const AdmitRequest& r, int limit) {
  int n = 0;
  while (n < limit) {
    AdmitResult a = h.admit(r);
    EXPECT_NE(a.outcome, Outcome::kUnavailable) << a.error;
    if (a.outcome != Outcome::kAllowed) break;
    ++n;
  }
  return n;
}

// A new bucket holds a third of its capacity and is stamped with its creation time c (= its
// first ts, kept by later takes); its key lives until it would be full, warm-up included. One
// created W/2 ago holds at most 2C/3, one created more than W ago all of C. A hash without c is
// warm; a gate without warm-up writes no c at all.
TEST_F(AdmissionTest, WarmupStartsAtAThirdAndRampsToTheCapacity) {
  config::Config cfg = base_config(redis_.port());
  config::Plan warm;
  warm.tenant = warm_bucket(30, 0.001, 600);
  for (const char* t : {"w-new", "w-half", "w-done", "w-old"}) add_tenant(cfg, t, warm);
  config::Plan plain;
  plain.tenant = bucket(30, 0.001);
  add_tenant(cfg, "w-plain", plain);
  Harness h(cfg);
  Sync s(redis_.port());

  const std::string key = keys::bucket("w-new", "tenant");
  AdmitResult first = h.admit(req("w-new"));
  ASSERT_EQ(first.outcome, Outcome::kAllowed) << first.error;
  EXPECT_NEAR(rem(first, "tenant"), 9, 1e-3);
  const std::string c = s.str({"HGET", key, "c"});
  EXPECT_EQ(c, s.str({"HGET", key, "ts"}));
  // Full 30 s from empty at the full rate... of 0.001/s, plus the 600 s of warm-up left.
  EXPECT_GE(std::stoll(s.str({"TTL", key})), 30000 + 600);
  EXPECT_EQ(admitted_in_a_row(h, req("w-new"), 40), 9);
  EXPECT_EQ(s.str({"HGET", key, "c"}), c);

  // Created W/2 and 2W ago, full: 20 and 30 requests (the ramp's capacity, not tk).
  const int64_t now = time_us(s);
  for (auto [tenant, age_s] : {std::pair<const char*, int64_t>{"w-half", 300}, {"w-done", 1200}}) {
    s.str({"HSET", keys::bucket(tenant, "tenant"), "tk", "30", "ts", us_text(now), "c",
           us_text(now - age_s * 1000000)});
  }
  AdmitResult half = h.admit(req("w-half"));
  ASSERT_EQ(half.outcome, Outcome::kAllowed) << half.error;
  EXPECT_NEAR(rem(half, "tenant"), 19, 0.05);  // 2C/3 - 1, a few ms later
  EXPECT_EQ(admitted_in_a_row(h, req("w-half"), 40), 19);
  EXPECT_EQ(admitted_in_a_row(h, req("w-done"), 40), 30);
  // A hash without c (a bucket made before the gate had warm-up) is warm, as is every bucket of
  // a gate without warm-up, which writes no c.
  s.str({"HSET", keys::bucket("w-old", "tenant"), "tk", "30", "ts", us_text(now)});
  EXPECT_EQ(admitted_in_a_row(h, req("w-old"), 40), 30);
  EXPECT_EQ(admitted_in_a_row(h, req("w-plain"), 40), 30);
  EXPECT_EQ(s.str({"HEXISTS", keys::bucket("w-plain", "tenant"), "c"}), "0");
  EXPECT_EQ(s.str({"HEXISTS", keys::bucket("w-old", "tenant"), "c"}), "0");
}

// The script's own read and wait (lua/lib_bucket.lua as embedded in admit.lua) at chosen
// instants: the refill is the exact integral of the ramp, piecewise around W, and the wait for
// a cost is exact to the millisecond: the level reaches it then and not a millisecond before,
// whether the ramp's level (a quadratic), the rate after W, or the ramp's capacity holds it back.
TEST_F(AdmissionTest, WarmupRefillIsTheRampsIntegralAndTheWaitIsExact) {
  // KEYS[1] bucket; ARGV: capacity, rate, warm-up, now (µs), cost.
  const std::string script = bucket_read_text() + R"(
local b = bucket_read(KEYS[1], tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]),
                      tonumber(ARGV[4]))
return {string.format('%.17g', b[5]), string.format('%.17g', b[6]),
        bucket_wait_ms(b, tonumber(ARGV[5]))})";  // b[5], b[6]: the level and the capacity now
  Harness h(base_config(redis_.port()));
  Sync s(redis_.port());
  const std::string key = keys::bucket("w-math", "tenant");
  const int64_t c0 = 1'700'000'000'000'000;  // the bucket's creation, µs
  struct Read {
    double cur, lim;
    int64_t wait_ms;
  };
  auto read = [&](double cap, double rate, double w, int64_t now_us, double cost) {
    redisReply* r = s.cmd({"EVAL", script, "1", key, std::to_string(cap), std::to_string(rate),
                           std::to_string(w), std::to_string(now_us), std::to_string(cost)});
    Read out{};
    if (r && r->type == REDIS_REPLY_ARRAY && r->elements == 3) {
      out = {std::stod(r->element[0]->str), std::stod(r->element[1]->str),
             static_cast<int64_t>(r->element[2]->integer)};
    } else {
      ADD_FAILURE() << (r && r->type == REDIS_REPLY_ERROR ? r->str : "no reply");
    }
    freeReplyObject(r);
    return out;
  };
  struct Case {
    double cap, rate, w, tk, ts_age_s, now_age_s, cost;
  };
  const Case cases[] = {
      {1e6, 10, 600, 5, 100, 150, 400},      // within the ramp: a quadratic
      {1e6, 10, 600, 5, 500, 800, 5000},     // a refill across W, then the full rate
      {1e6, 10, 600, 5, 500, 550, 5000},     // a wait across W
      {1e6, 10, 600, 5, 700, 900, 3000},     // after W: linear
      {1e6, 10, 600, 5, 0, 0.25, 1000},      // just created
      {3000, 1, 600, 5000, 10, 10, 2500},    // the ramp's capacity holds it back: 440 s
      {1000, 2.5, 86400, 3, 3600, 3601, 7},  // a day's ramp
  };
  for (const Case& k : cases) {
    SCOPED_TRACE("cap " + std::to_string(k.cap) + " rate " + std::to_string(k.rate) + " ages " +
                 std::to_string(k.ts_age_s) + ".." + std::to_string(k.now_age_s));
    const int64_t ts = c0 + static_cast<int64_t>(k.ts_age_s * 1e6);
    const int64_t now = c0 + static_cast<int64_t>(k.now_age_s * 1e6);
    std::ostringstream tk;
    tk << k.tk;
    s.str({"DEL", key});
    s.str({"HSET", key, "tk", tk.str(), "ts", us_text(ts), "c", us_text(c0)});
    const Read r = read(k.cap, k.rate, k.w, now, k.cost);
    const double lim = k.now_age_s >= k.w ? k.cap : k.cap / 3 + 2 * k.cap / 3 * k.now_age_s / k.w;
    const double want = std::min(lim, k.tk + ramp_integral(k.rate, k.w, k.ts_age_s, k.now_age_s));
    EXPECT_NEAR(r.cur, want, 1e-6 * want);
    EXPECT_NEAR(r.lim, lim, 1e-9 * lim);
    // Not rate(now) · elapsed.
    if (k.now_age_s - k.ts_age_s >= 10 && k.ts_age_s < k.w) {
      const double naive = k.tk + k.rate * (1 + 2 * std::min(k.now_age_s, k.w) / k.w) / 3 *
                                      (k.now_age_s - k.ts_age_s);
      EXPECT_GT(std::abs(naive - want), 1e-3) << "a case that tells the integral apart";
    }
    ASSERT_GT(r.wait_ms, 0);
    // The level at now + wait holds the cost, a millisecond before it does not.
    const double at = read(k.cap, k.rate, k.w, now + r.wait_ms * 1000, k.cost).cur;
    const double before = read(k.cap, k.rate, k.w, now + (r.wait_ms - 1) * 1000, k.cost).cur;
    EXPECT_GE(at, k.cost - 1e-9 * k.cost) << r.wait_ms;
    EXPECT_LT(before, k.cost) << r.wait_ms;
  }
  // No refill at all (a brake of 0): a day, as without warm-up.
  s.str({"DEL", key});
  EXPECT_EQ(read(30, 0, 600, c0, 20).wait_ms, 86400000);
  // A key never seen: a third of the capacity, the ramp from age 0.
  const Read fresh = read(30, 1, 600, c0, 20);
  EXPECT_EQ(fresh.cur, 10);
  EXPECT_EQ(fresh.lim, 10);
  // 20 needs cap(a) = 20 (a = 300 s) and a level of 20 (10 + the integral from 0: 28.6 s).
  EXPECT_EQ(fresh.wait_ms, 300000);
  EXPECT_EQ(read(1e6, 1, 600, c0, 20).wait_ms, 0);  // held already
}

// The engine's retry_after during the ramp is the ramp's own: for a token-rate gate at age W/2,
// the time the quadratic takes to refill the estimate, not estimate / rate(now) (185 ms apart).
// A refusal by an existing warming bucket writes nothing; a cost above C/3 on a new bucket
// creates it (level C/3, c = now), so that its ramp starts, and waits for the capacity and the
// level to reach the cost; the next refusal then writes nothing.
TEST_F(AdmissionTest, WarmupRetryAfterFollowsTheRampAndANewBucketStarts) {
  config::Config cfg = base_config(redis_.port());
  config::Plan plan;
  plan.tenant_tokens = warm_bucket(3000, 10, 600);
  add_tenant(cfg, "wt", plan);
  add_tenant(cfg, "wt-new", plan);
  config::Plan small;
  small.tenant_tokens = warm_bucket(3000, 1, 600);
  add_tenant(cfg, "wt-small", small);
  Harness h(cfg);
  Sync s(redis_.port());

  const std::string key = keys::bucket("wt", "tenant_tokens");
  const int64_t t0 = time_us(s) / 1000000 * 1000000;  // a whole second: ts <= the script's now
  s.str({"HSET", key, "tk", "0", "ts", us_text(t0), "c", us_text(t0 - 300'000'000)});
  const auto before = s.dump();
  const int64_t lo = time_us(s);
  AdmitResult r = h.admit(req("wt", 100));
  const int64_t hi = time_us(s);
  ASSERT_EQ(r.outcome, Outcome::kRefused) << r.error;
  EXPECT_EQ(r.gate, "tenant_tokens");
  EXPECT_EQ(s.dump(), before);
  // The script ran between lo and hi: its level was the integral from 300 s to 300 s + d.
  auto wait_at = [&](int64_t now) {
    const double d = static_cast<double>(now - t0) / 1e6;
    const double need = 100 - ramp_integral(10, 600, 300, 300 + d);
    return ramp_wait(10, 600, 300 + d, need) * 1000;
  };
  EXPECT_GE(static_cast<double>(r.retry_after_ms), std::floor(wait_at(hi)));
  EXPECT_LE(static_cast<double>(r.retry_after_ms), std::ceil(wait_at(lo)) + 1);
  // (100 - level) / rate(now) would be about 15000 ms.
  const double d = static_cast<double>(hi - t0) / 1e6;
  const double naive =
      (100 - ramp_integral(10, 600, 300, 300 + d)) / (10 * (1 + 2 * (300 + d) / 600) / 3) * 1000;
  EXPECT_LT(static_cast<double>(r.retry_after_ms), naive - 100);

  // A new bucket holds 1000: 600 passes, 600 more does not.
  const std::string nkey = keys::bucket("wt-new", "tenant_tokens");
  ASSERT_EQ(h.admit(req("wt-new", 600)).outcome, Outcome::kAllowed);
  AdmitResult second = h.admit(req("wt-new", 600));
  ASSERT_EQ(second.outcome, Outcome::kRefused);
  EXPECT_NEAR(rem(second, "tenant_tokens"), 400, 1);
  // A settle below the estimate gives back up to the ramp's capacity (1000 and a little), not
  // the full one: 950 (as if refilled since) + 300 would be 1250.
  AdmitResult taken = h.admit(req("wt-new", 300));
  ASSERT_EQ(taken.outcome, Outcome::kAllowed) << taken.error;
  s.str({"HSET", nkey, "tk", "950"});
  SettleResult settled = h.settle("wt-new", taken.request_id, 0);
  EXPECT_TRUE(settled.settled) << settled.error;
  EXPECT_GE(std::stod(s.str({"HGET", nkey, "tk"})), 1000);
  EXPECT_LE(std::stod(s.str({"HGET", nkey, "tk"})), 1001);

  // 1500 > C/3 on a bucket never seen: refused, and the bucket is created at 1000 with c = now.
  const std::string skey = keys::bucket("wt-small", "tenant_tokens");
  AdmitResult cold = h.admit(req("wt-small", 1500));
  ASSERT_EQ(cold.outcome, Outcome::kRefused) << cold.error;
  EXPECT_EQ(cold.gate, "tenant_tokens");
  EXPECT_EQ(s.str({"HGET", skey, "tk"}), "1000");
  EXPECT_EQ(s.str({"HGET", skey, "c"}), s.str({"HGET", skey, "ts"}));
  // The capacity reaches 1500 at 150 s; the level (1000 + 400 over the ramp, then 1/s) at 700 s.
  EXPECT_NEAR(static_cast<double>(cold.retry_after_ms), 700000, 50);
  const auto created = s.dump();
  AdmitResult again = h.admit(req("wt-small", 1500));
  ASSERT_EQ(again.outcome, Outcome::kRefused);
  EXPECT_EQ(s.dump(), created);
  EXPECT_NEAR(static_cast<double>(again.retry_after_ms), 700000, 100);
}

// A refusal by another gate leaves a new warming bucket uncreated (it would have admitted: its
// first admission starts its ramp), and the undo of an admission that created one deletes it
// (refund.lua, ungates.lua). Global gates (gates.lua) and shadow buckets warm up alike: a new
// shadow bucket reports from a third of its capacity on.
TEST_F(AdmissionTest, WarmupAllOrNothingGlobalAndShadowGates) {
  config::Config cfg = base_config(redis_.port());
  config::Plan plan;
  plan.tenant = bucket(1, 0.0001);
  plan.user = warm_bucket(30, 0.001, 600);
  add_tenant(cfg, "wa", plan);
  config::Plan warm;
  warm.tenant = warm_bucket(30, 0.001, 600);
  add_tenant(cfg, "wr", warm);
  config::Plan shadow;
  shadow.tenant = shadow_bucket(30, 0.001);
  shadow.tenant->warmup_s = 600;
  add_tenant(cfg, "ws", shadow);
  add_tenant(cfg, "wm", config::Plan{});
  cfg.global_gates.model["m-warm"] = warm_bucket(30, 0.001, 600);
  cfg.global_gates.model["m-fresh"] = warm_bucket(30, 0.001, 600);
  cfg.global_gates.model["m-deny"] = bucket(1, 0.0001);
  Harness h(cfg);
  Sync s(redis_.port());

  // A refusal by `gate` that leaves every key as it was.
  auto refused_as_before = [&](const AdmitRequest& r, const std::string& gate) {
    const auto before = s.dump();
    AdmitResult a = h.admit(r);
    EXPECT_EQ(a.outcome, Outcome::kRefused) << a.error;
    EXPECT_EQ(a.gate, gate);
    EXPECT_EQ(s.dump(), before);
    return a;
  };

  AdmitRequest r = req("wa");
  r.user = "u1";
  ASSERT_EQ(h.admit(r).outcome, Outcome::kAllowed);  // the tenant bucket is empty now
  r.user = "u2";
  AdmitResult refused = refused_as_before(r, "tenant");  // no bucket for u2
  EXPECT_NEAR(rem(refused, "user"), 10, 1e-6);

  // Admitted by the new m-fresh bucket, refused by the tenant: ungates.lua deletes the bucket.
  AdmitRequest fresh = req("wa");
  fresh.model = "m-fresh";
  refused_as_before(fresh, "tenant");
  EXPECT_EQ(s.str({"EXISTS", keys::global_bucket("model", "m-fresh")}), "0");

  // The model gate warms up: 10 of 30 admitted, then it refuses, writing nothing.
  AdmitRequest m = req("wm");
  m.model = "m-warm";
  EXPECT_EQ(admitted_in_a_row(h, m, 40), 10);
  EXPECT_GT(refused_as_before(m, "model").retry_after_ms, 0);
  EXPECT_EQ(s.str({"HGET", keys::global_bucket("model", "m-warm"), "c"}).size(), 16u);

  // A new warming tenant bucket admitted, the model refusing: refund.lua deletes it.
  AdmitRequest deny = req("wm");
  deny.model = "m-deny";
  ASSERT_EQ(h.admit(deny).outcome, Outcome::kAllowed);
  deny.tenant = "wr";
  refused_as_before(deny, "model");
  EXPECT_EQ(s.str({"EXISTS", keys::bucket("wr", "tenant")}), "0");

  // A shadow bucket warms up too: every request admitted, named from the 11th on.
  for (int i = 1; i <= 12; ++i) {
    AdmitResult a = h.admit(req("ws"));
    ASSERT_EQ(a.outcome, Outcome::kAllowed) << a.error;
    EXPECT_EQ(a.shadow_refused, i <= 10 ? "" : "tenant") << i;
  }
}

// Under a brake the ramp runs over the braked capacity and refill: a new bucket of 30 under a
// brake of 0.5 holds 5.
TEST_F(AdmissionTest, WarmupRunsOverTheBrakedRates) {
  config::Config cfg = base_config(redis_.port());
  config::Plan plan;
  plan.tenant = warm_bucket(30, 0.001, 600);
  add_tenant(cfg, "wb", plan);
  Harness h(cfg);
  Brake b;
  b.factor = 0.5;
  h.store().publish_brake(std::make_shared<const Brake>(b));
  AdmitResult first = h.admit(req("wb"));
  ASSERT_EQ(first.outcome, Outcome::kAllowed) << first.error;
  EXPECT_EQ(first.brake, 0.5);
  EXPECT_NEAR(rem(first, "tenant"), 4, 1e-3);
  EXPECT_EQ(admitted_in_a_row(h, req("wb"), 20), 4);
}

TEST(AdmitScriptCall, MatchesTheEngineArguments) {
  config::Config cfg = base_config(6379);
  config::Plan plan;
  plan.tenant = bucket(20, 5);
  plan.user = bucket(6, 2);
  plan.user->warmup_s = 30;
  plan.quota = config::Quota::monthly(1000, 600);
  add_tenant(cfg, "ws-acme", plan);
  AdmitRequest r = req("ws-acme", 42);
  r.user = "alice";
  r.request_id = "rq-1";
  auto call = admit_script_call(cfg, r);
  ASSERT_TRUE(call);
  EXPECT_EQ(call->script, "admit");
  EXPECT_EQ(call->text, admit_script_text());
  EXPECT_EQ(call->sha1.size(), 40u);
  // The attempt is new for every call: 16 hex digits, after the four flags.
  ASSERT_EQ(call->args.size(), 29u);
  const std::string attempt = call->args[1].substr(4);
  EXPECT_EQ(attempt.size(), 16u);
  EXPECT_EQ(attempt.find_first_not_of("0123456789abcdef"), std::string::npos) << attempt;
  // The reservation windows and the quota months around the gateway's clock (the script picks
  // by Redis TIME among them).
  const keys::Months& m = keys::current_months();
  const int64_t w = std::stoll(call->args[7]);
  std::vector<std::string> keys;
  for (int64_t i = w - 2; i <= w + 2; ++i)
    keys.push_back("dg:{t:ws-acme}:r:600:" + std::to_string(i));
  keys.insert(keys.end(), {"dg:{t:ws-acme}:leases", "dg:{t:ws-acme}:q:" + m.prev.name,
                           "dg:{t:ws-acme}:q:" + m.cur.name, "dg:{t:ws-acme}:q:" + m.next.name,
                           "dg:{t:ws-acme}:tb:tenant", "dg:{t:ws-acme}:tb:user:alice"});
  EXPECT_EQ(call->keys, keys);
  EXPECT_NEAR(static_cast<double>(w), static_cast<double>(std::time(nullptr) / 600), 1);
  // flags: not fresh (the client's own id), a snapshot, no shadow quota or concurrency.
  std::vector<std::string> args = {
      "rq-1", "0100" + attempt, "42", "600", "-1", "-1", "120", std::to_string(w),
      std::string(kNoDeadline), "1", "2",
      // the quota: its gate, budget and the months' bounds
      "quota", "1000", m.prev.start_s, m.cur.start_s, m.cur.end_s, m.next.end_s,
      // the buckets; no sliding window, so neither their count nor a member to add
      "tenant", "20", "5", "1", "0", "0", "user", "6", "2", "1", "0", "30"};
  EXPECT_EQ(call->args, args);
  // An id the engine generates is new: the script need not look for it in the older window.
  r.request_id.clear();
  EXPECT_EQ(admit_script_call(cfg, r)->args[1].substr(0, 4), "1100");  // flags: fresh
  r.request_id = "rq-1";
  EXPECT_NE(admit_script_call(cfg, r)->args[1].substr(4), attempt);
  // The ip gate's bucket: in the tenant's hash slot, named by the address as normalised (an
  // IPv6 address by its /64).
  cfg.plans["plan-ws-acme"].ip = bucket(3, 1);
  r.client_ip = "2001:db8:1:2::77";
  call = admit_script_call(cfg, r);
  ASSERT_TRUE(call);
  EXPECT_EQ(call->keys.back(), "dg:{t:ws-acme}:tb:ip:2001:db8:1:2::/64");
  EXPECT_EQ(call->args[10], "3");  // bucket_count
  EXPECT_EQ(std::vector<std::string>(call->args.end() - 6, call->args.end()),
            (std::vector<std::string>{"ip", "3", "1", "1", "0", "0"}));
  r.client_ip.clear();
  std::string err;
  r.tenant = "nobody";
  EXPECT_FALSE(admit_script_call(cfg, r, &err));
  EXPECT_EQ(err, "tenant: unknown tenant 'nobody'");
}

}  // namespace
// reconcile.lua: a journaled local decision is charged once per record, in the slot of its
// journal's applied set: the month's counter moves by the tokens (a settle below its estimate
// takes some back), each bucket gives one token, down to empty and never below.
TEST_F(AdmissionTest, ChargeAppliesEachRecordOnce) {
  Harness h(base_config(redis_.port()));
  Sync s(redis_.port());
  auto charge = [&](const ReconcileRecord& c) {
    return h.run<std::string>([&](auto done) { h.engine().reconcile({&c, 1}, done); });
  };
  const std::string quota = keys::quota("t", "2026-12"), tb = keys::bucket("t", "tenant");
  const std::string applied = keys::applied("t", "0123456789abcdef");
  ReconcileRecord c;
  c.seq = "1";
  c.applied_key = applied;
  c.quotas = {{quota, "1801440000"}};
  c.tokens = 100;
  c.buckets = {{tb, "2", "0"}};  // no refill: the levels are exact
  EXPECT_EQ(charge(c), "");
  EXPECT_EQ(charge(c), "");  // sent again (a crash before the journal said so): nothing more
  EXPECT_EQ(s.str({"GET", quota}), "100");
  EXPECT_EQ(s.str({"HGET", tb, "tk"}), "1");
  ReconcileRecord settle = c;
  settle.seq = "2";
  settle.tokens = -40;
  settle.buckets.clear();
  EXPECT_EQ(charge(settle), "");
  EXPECT_EQ(s.str({"GET", quota}), "60");
  EXPECT_NE(s.str({"TTL", quota}), "-1");
  for (const char* seq : {"3", "4"}) {
    c.seq = seq;
    EXPECT_EQ(charge(c), "");
  }
  EXPECT_EQ(s.str({"HGET", tb, "tk"}), "0");  // emptied, not below
  EXPECT_EQ(s.str({"GET", quota}), "260");
  // A global gate's part, in its own slot with its own set of applied sequences.
  ReconcileRecord g;
  g.seq = "3";
  g.applied_key = keys::global_applied("model", "m", "0123456789abcdef");
  g.buckets = {{keys::global_bucket("model", "m"), "5", "0"}};
  EXPECT_EQ(charge(g), "");
  EXPECT_EQ(charge(g), "");
  EXPECT_EQ(s.str({"HGET", keys::global_bucket("model", "m"), "tk"}), "4");
  EXPECT_EQ(s.str({"ZCARD", applied}), "4");
  int64_t ttl = std::stoll(s.str({"TTL", applied}));
  EXPECT_GT(ttl, 0);
  EXPECT_LE(ttl, kAppliedTtlS);
  // Another journal's record 1 is another record.
  ReconcileRecord other = c;
  other.seq = "1";
  other.applied_key = keys::applied("t", "00000000000000ff");
  EXPECT_EQ(charge(other), "");
  EXPECT_EQ(s.str({"GET", quota}), "360");
}

// One reconcile.lua call carries many records of one applied set, in sequence order, each with
// its own buckets and month: applied as the same records sent one by one would be (an admission
// down to empty, a settle's refund after it), those applied already skipped, and the call sent
// again changes nothing.
TEST_F(AdmissionTest, OneCallAppliesManyRecordsInOrderAndEachOnce) {
  Harness h(base_config(redis_.port()));
  Sync s(redis_.port());
  auto charge = [&](const std::vector<ReconcileRecord>& cs) {
    return h.run<std::string>([&](auto done) { h.engine().reconcile(cs, done); });
  };
  const std::string applied = keys::applied("t", "0123456789abcdef");
  const std::string dec = keys::quota("t", "2026-12"), jan = keys::quota("t", "2027-01");
  const std::string tb = keys::bucket("t", "tenant"), ub = keys::bucket("t", "user", "u");
  const std::string tt = keys::bucket("t", "tenant_tokens");
  auto record = [&](std::string seq, const std::string& quota, int64_t tokens, bool exact,
                    std::vector<ReconcileRecord::Bucket> buckets) {
    ReconcileRecord c;
    c.seq = std::move(seq);
    c.applied_key = applied;
    c.quotas = {{quota, quota == dec ? "1801440000" : "1804118400"}};
    c.tokens = tokens;
    c.exact = exact;
    c.buckets = std::move(buckets);
    return c;
  };
  std::vector<ReconcileRecord> batch = {
      record("1", dec, 100, false, {{tb, "2", "0"}, {tt, "1000", "0", "100"}}),
      record("2", dec, 100, false, {{tb, "2", "0"}, {ub, "5", "0"}}),
      record("3", dec, 100, false, {{tb, "2", "0"}}),           // the bucket is empty: stays at 0
      record("4", jan, -40, true, {{tt, "1000", "0", "-40"}}),  // a settle below its estimate
  };
  EXPECT_EQ(charge({batch[0]}), "");  // record 1 was applied before
  EXPECT_EQ(charge(batch), "");
  EXPECT_EQ(s.str({"GET", dec}), "300");
  EXPECT_EQ(s.str({"GET", jan}), "-40");
  EXPECT_EQ(s.str({"HGET", tb, "tk"}), "0");
  EXPECT_EQ(s.str({"HGET", ub, "tk"}), "4");
  EXPECT_EQ(s.str({"HGET", tt, "tk"}), "940");
  EXPECT_EQ(s.str({"ZCARD", applied}), "4");
  const auto before = s.dump();
  EXPECT_EQ(charge(batch), "");
  EXPECT_EQ(s.dump(), before);
  // The watermark sent with a later batch trims the set to what lies above it.
  std::vector<ReconcileRecord> later = {record("5", dec, 1, false, {})};
  later[0].watermark = "4";
  EXPECT_EQ(charge(later), "");
  EXPECT_EQ(s.str({"ZCARD", applied}), "2");  // the watermark and 5
  EXPECT_EQ(s.str({"ZSCORE", applied, "w"}), "4");
  EXPECT_EQ(s.str({"GET", dec}), "301");
}

// The watermark a call carries (every record of the journal up to it is in Redis) trims the
// applied set to the sequences above it, and a record at or below it is known as applied.
TEST_F(AdmissionTest, TheWatermarkTrimsTheAppliedSet) {
  Harness h(base_config(redis_.port()));
  Sync s(redis_.port());
  auto charge = [&](const ReconcileRecord& c) {
    return h.run<std::string>([&](auto done) { h.engine().reconcile({&c, 1}, done); });
  };
  const std::string quota = keys::quota("t", "2026-12");
  const std::string applied = keys::applied("t", "0123456789abcdef");
  ReconcileRecord c;
  c.applied_key = applied;
  c.quotas = {{quota, "1801440000"}};
  c.tokens = 1;
  for (int seq = 1; seq <= 100; ++seq) {
    c.seq = std::to_string(seq);
    c.watermark = "0";
    EXPECT_EQ(charge(c), "");
  }
  EXPECT_EQ(s.str({"ZCARD", applied}), "100");
  c.seq = "101";
  c.watermark = "100";
  EXPECT_EQ(charge(c), "");
  EXPECT_EQ(s.str({"ZCARD", applied}), "2");  // 101 and the watermark
  EXPECT_EQ(s.str({"ZSCORE", applied, "w"}), "100");
  // Sent again after a crash: below the watermark, or in the set, nothing more is charged.
  for (const char* seq : {"7", "100", "101"}) {
    c.seq = seq;
    c.watermark = "0";  // an older watermark never moves it back
    EXPECT_EQ(charge(c), "");
  }
  EXPECT_EQ(s.str({"GET", quota}), "101");
  EXPECT_EQ(s.str({"ZSCORE", applied, "w"}), "100");
}

// A bucket's cost: an admission takes it, down to empty and never below (nor further down from
// below zero); a correction (exact) applies its delta as settle.lua does, below zero or back up
// to the capacity.
TEST_F(AdmissionTest, ChargeTakesEachBucketsCostAndCorrectsExactly) {
  Harness h(base_config(redis_.port()));
  Sync s(redis_.port());
  auto charge = [&](const ReconcileRecord& c) {
    return h.run<std::string>([&](auto done) { h.engine().reconcile({&c, 1}, done); });
  };
  const std::string tb = keys::bucket("t", "tenant_tokens");
  ReconcileRecord c;
  c.seq = "1";
  c.applied_key = keys::applied("t", "00000000000000aa");
  c.quotas = {{keys::quota("t", "2026-12"), "1801440000"}};
  c.tokens = 300;
  c.buckets = {{tb, "1000", "0", "300"}};
  EXPECT_EQ(charge(c), "");
  EXPECT_EQ(s.str({"HGET", tb, "tk"}), "700");
  ReconcileRecord settle = c;
  settle.seq = "2";
  settle.exact = true;
  settle.tokens = 500;
  settle.buckets[0].cost = "900";  // used far more than estimated: below zero
  EXPECT_EQ(charge(settle), "");
  EXPECT_EQ(s.str({"HGET", tb, "tk"}), "-200");
  c.seq = "3";  // an admission finds it below zero: left there
  EXPECT_EQ(charge(c), "");
  EXPECT_EQ(s.str({"HGET", tb, "tk"}), "-200");
  settle.seq = "4";
  settle.buckets[0].cost = "-5000";  // a refund stops at the capacity
  EXPECT_EQ(charge(settle), "");
  EXPECT_EQ(s.str({"HGET", tb, "tk"}), "1000");
  c.seq = "5";
  c.buckets[0].cost = "1200";  // more than it holds: emptied, not below
  EXPECT_EQ(charge(c), "");
  EXPECT_EQ(s.str({"HGET", tb, "tk"}), "0");
  EXPECT_EQ(s.str({"GET", c.quotas[0].key}), "1900");
}

}  // namespace dripgate::control
