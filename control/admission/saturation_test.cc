// The saturation law on explicit inputs and times, and prepare() scaling a model gate by its
// share (with the brake: the product). No Redis, no clock.
#include "control/admission/saturation.h"

#include <gtest/gtest.h>

#include <chrono>
#include <random>

#include "control/admission/script_calls.h"

namespace dripgate::control {
namespace {

using std::chrono::milliseconds;
using Clock = SaturationLaw::Clock;

config::Saturation cfg(double min = 0.1, double max = 1) {
  config::Saturation s;
  s.url = "http://h/";
  s.metric = "m";
  s.target = 8;
  s.min_share = min;
  s.max_share = max;
  s.increase = 0.1;
  s.decrease = 0.5;
  s.interval_ms = 1000;
  s.failures = 3;
  return s;
}

// The scrapes' due times: one interval apart.
Clock::time_point at(int i) {
  return Clock::time_point{} + milliseconds(1000) * (i + 1);
}

TEST(SaturationLaw, AboveTargetHalvesDownToTheFloorAtOrBelowAddsUpToTheCeiling) {
  SaturationLaw law(cfg());
  EXPECT_EQ(law.share(), 1);
  EXPECT_EQ(law.signal(9, at(0)), 0.5);
  EXPECT_EQ(law.signal(100, at(1)), 0.25);
  EXPECT_EQ(law.signal(1e300, at(2)), 0.125);
  EXPECT_EQ(law.signal(INFINITY, at(3)), 0.1);  // the floor
  EXPECT_EQ(law.signal(9, at(4)), 0.1);
  EXPECT_DOUBLE_EQ(law.signal(8, at(5)), 0.2);  // at the target: room
  EXPECT_DOUBLE_EQ(law.signal(-INFINITY, at(6)), 0.3);
  for (int i = 7; i < 20; ++i) law.signal(0, at(i));
  EXPECT_EQ(law.share(), 1);  // the ceiling
}

TEST(SaturationLaw, MovesAtMostOncePerInterval) {
  SaturationLaw law(cfg());
  const Clock::time_point t = at(0);
  EXPECT_EQ(law.signal(9, t), 0.5);
  EXPECT_EQ(law.signal(9, t + milliseconds(999)), 0.5);  // a second scrape too soon
  EXPECT_EQ(law.signal(0, t + milliseconds(500)), 0.5);
  EXPECT_EQ(law.signal(9, t + milliseconds(1000)), 0.25);
}

TEST(SaturationLaw, FailuresHoldThenDriftBackToTheConfiguredRate) {
  SaturationLaw law(cfg());
  law.signal(9, at(0));
  law.signal(9, at(1));
  ASSERT_EQ(law.share(), 0.25);
  EXPECT_EQ(law.failure(at(2)), 0.25);
  EXPECT_EQ(law.signal(NAN, at(3)), 0.25);  // NaN is no signal
  EXPECT_EQ(law.failures(), 2);
  EXPECT_DOUBLE_EQ(law.failure(at(4)), 0.35);  // the third in a row
  EXPECT_DOUBLE_EQ(law.failure(at(5)), 0.45);
  EXPECT_DOUBLE_EQ(law.failure(at(5) + milliseconds(10)), 0.45);  // once per interval
  for (int i = 6; i < 20; ++i) law.failure(at(i));
  EXPECT_EQ(law.share(), 1);  // and no further
  // A signal ends the run of failures.
  EXPECT_EQ(law.signal(9, at(20)), 0.5);
  EXPECT_EQ(law.failures(), 0);
  EXPECT_EQ(law.failure(at(21)), 0.5);
}

// max_share above 1: the law may raise the gate above its configured rate; failures bring it
// back down to that rate, not to the ceiling.
TEST(SaturationLaw, ACeilingAboveTheConfiguredRateAndFailuresComeBackToIt) {
  SaturationLaw law(cfg(0.1, 1.5));
  EXPECT_EQ(law.share(), 1);
  for (int i = 0; i < 10; ++i) law.signal(0, at(i));
  EXPECT_EQ(law.share(), 1.5);
  for (int i = 10; i < 12; ++i) law.failure(at(i));
  EXPECT_EQ(law.share(), 1.5);
  EXPECT_DOUBLE_EQ(law.failure(at(12)), 1.4);
  for (int i = 13; i < 30; ++i) law.failure(at(i));
  EXPECT_EQ(law.share(), 1);
}

TEST(SaturationLaw, AReloadKeepsTheShareWithinTheNewBounds) {
  SaturationLaw law(cfg());
  law.signal(9, at(0));
  ASSERT_EQ(law.share(), 0.5);
  law.configure(cfg(0.6, 1));
  EXPECT_EQ(law.share(), 0.6);
  law.configure(cfg(0.1, 0.3));
  EXPECT_EQ(law.share(), 0.3);
  EXPECT_EQ(SaturationLaw(cfg(0.1, 0.5)).share(), 0.5);  // starts within its bounds
}

TEST(SaturationShares, OfAModelGate) {
  SaturationShares s{{{"llama", 0.5}}, {{"llama", 0.25}}};
  EXPECT_EQ(s.of("model", "llama"), 0.5);
  EXPECT_EQ(s.of("model_tokens", "llama"), 0.25);
  EXPECT_EQ(s.of("model", "other"), 1);
  EXPECT_EQ(s.of("tool", "llama"), 1);
}

// prepare() points a model gate at a scaled copy (capacity, refill, a window's limit), a
// shadow one too; the brake multiplies in on enforced gates and is the factor reported.
TEST(SaturationPrepare, ScalesTheModelGatesByTheirShare) {
  config::Config c;
  config::Plan plan;
  plan.name = "p";
  plan.tenant = config::Bucket{10, 5};
  c.plans["p"] = plan;
  c.tenants["t"] = config::Tenant{"t", "p"};
  c.global_gates.model["llama"] = config::Bucket{100, 40};
  c.global_gates.model_tokens["llama"] = config::Bucket{1000, 100};
  config::Bucket window;
  window.algorithm = config::Algorithm::kSlidingWindow;
  window.limit = 10;
  window.window_s = 1;
  window.mode = config::GateMode::kShadow;
  c.global_gates.model["qwen"] = window;
  Tables tables(c);
  std::mt19937_64 rng(1);
  SaturationShares shares{{{"llama", 0.5}, {"qwen", 0.25}}, {{"llama", 0.1}}};
  AdmitRequest r;
  r.tenant = "t";
  r.model = "llama";
  r.tokens = 100;

  Prepared p;
  ASSERT_EQ(prepare(tables, r, rng, p, nullptr, nullptr, 0, &shares), "");
  ASSERT_EQ(p.ng, 2);
  EXPECT_EQ(p.globals[0]->capacity, 50);
  EXPECT_EQ(p.globals[0]->refill, 20);
  EXPECT_EQ(p.globals[0]->rate_s, "20");
  EXPECT_EQ(p.globals[1]->capacity, 100);
  EXPECT_EQ(p.globals[1]->refill, 10);
  EXPECT_EQ(p.buckets[0]->capacity, 10);  // the tenant's own gate is not the model's
  EXPECT_EQ(p.brake, 1);

  // An estimate the configured capacity holds waits out the saturation: not a 400.
  Prepared big;
  r.tokens = 500;
  EXPECT_EQ(prepare(tables, r, rng, big, nullptr, nullptr, 0, &shares), "");

  const Brake brake{0.5, {}, 60};
  Prepared b;
  ASSERT_EQ(prepare(tables, r, rng, b, nullptr, &brake, 0, &shares), "");
  EXPECT_EQ(b.globals[0]->capacity, 25);
  EXPECT_EQ(b.globals[1]->refill, 5);
  EXPECT_EQ(b.buckets[0]->capacity, 5);
  EXPECT_EQ(b.brake, 0.5);

  Prepared w;
  r.model = "qwen";
  ASSERT_EQ(prepare(tables, r, rng, w, nullptr, &brake, 0, &shares), "");
  ASSERT_EQ(w.ng, 1);
  EXPECT_EQ(w.globals[0]->limit, 2);  // shadow: the share, not the brake; rounded down
  EXPECT_EQ(w.globals[0]->limit_s, "2");

  // Without shares the configured gates are used as they are, no copy made.
  Prepared none;
  r.model = "llama";
  ASSERT_EQ(prepare(tables, r, rng, none), "");
  EXPECT_EQ(none.globals[0], &tables.models.at("llama"));
  EXPECT_FALSE(none.braked[0]);
}

}  // namespace
}  // namespace dripgate::control
