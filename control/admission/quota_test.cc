// A plan's several token quotas (quota.tokens_per_<period>) against a real redis-server, and in
// the cluster run (DRIPGATE_ADMISSION_CLUSTER=1) against a 3-master Redis Cluster: every quota
// charged in the one admit.lua call or none, each counted in its own period and reset on its own
// boundary, a settle's correction in the period of the admission, reconciliation.
//
// The scripts take the periods' bounds from the gateway (lua/lib_quota.lua), so the tests that
// move a boundary declare bounds placed around Redis TIME by hand (time alignment) instead of
// waiting for a real one; the engine's own declaration is checked against the calendar.
#include <gtest/gtest.h>
#include <hiredis/hiredis.h>

#include <random>
#include <string>
#include <thread>
#include <vector>

#include "common/quota_period.h"
#include "control/admission/keys.h"
#include "control/admission/script_calls.h"
#include "tests/admission_test_support.h"
#include "tests/redis_server.h"

namespace dripgate::control {
namespace {

using namespace admission_testing;
using common::Period;

class QuotaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cluster()) freeReplyObject(Sync(0).cmd({"FLUSHALL"}));
  }
  testing::RedisServer redis_;
};

config::Quota quotas(std::vector<config::QuotaLimit> limits) {
  config::Quota q;
  q.limits = std::move(limits);
  return q;
}

// A zone in which unix second now is more than an hour from a local midnight, so that no day,
// week or month of the test's plan ends while it runs.
std::string calm_zone(int64_t now) {
  const int64_t hour = now % 86400 / 3600;
  return hour >= 1 && hour <= 22 ? "UTC" : "Asia/Kolkata";
}

std::string expire_of(const keys::Month& m) {
  return std::to_string(m.end + (m.end - m.start));
}

// Three consecutive periods named a, b, c with the bounds given (time alignment).
keys::Months periods(const std::string& a, const std::string& b, const std::string& c,
                     int64_t prev_start, int64_t start, int64_t end, int64_t next_end) {
  auto m = [](const std::string& n, int64_t from, int64_t to) {
    return keys::Month{n, std::to_string(from), std::to_string(to), from, to};
  };
  return {m(a, prev_start, start), m(b, start, end), m(c, end, next_end)};
}

// Every quota of a plan is charged in the one call or none is: the tighter refuses, naming
// itself, and leaves the other's counter as it was; a refusal by a global gate in another slot
// gives every quota its charge back (refund.lua), and removes the counters it made. Each counter
// expires a period after its own period's end.
TEST_F(QuotaTest, EveryQuotaIsChargedOrNone) {
  Sync s(redis_.port());
  const int64_t now = s.time_s();
  ASSERT_GT(now, 0);
  config::Config cfg = base_config(redis_.port());
  config::Plan daily;
  daily.quota = quotas({{Period::kDay, 100}, {Period::kMonth, 1000}});
  daily.quota_timezone = calm_zone(now);
  add_tenant(cfg, "ws-day", daily);
  add_tenant(cfg, "ws-fresh", daily);
  config::Plan monthly = daily;
  monthly.quota = quotas({{Period::kDay, 1000}, {Period::kMonth, 100}});
  add_tenant(cfg, "ws-month", monthly);
  cfg.global_gates.model["m1"] = bucket(1, 0);
  Harness h(cfg);
  const auto zone = common::QuotaCalendar::load(daily.quota_timezone);
  ASSERT_TRUE(zone);
  const keys::Months day = keys::periods_around(*zone, Period::kDay, now);
  const keys::Months month = keys::periods_around(*zone, Period::kMonth, now);
  auto count = [&](const std::string& tenant, const keys::Months& m) {
    return s.str({"GET", keys::quota(tenant, m.cur.name)});
  };

  AdmitResult a = h.admit(req("ws-day", 60));
  ASSERT_EQ(a.outcome, Outcome::kAllowed) << a.error;
  EXPECT_EQ(rem(a, "quota_day"), 40);
  EXPECT_EQ(rem(a, "quota"), 940);
  EXPECT_EQ(s.str({"EXPIRETIME", keys::quota("ws-day", day.cur.name)}), expire_of(day.cur));
  EXPECT_EQ(s.str({"EXPIRETIME", keys::quota("ws-day", month.cur.name)}), expire_of(month.cur));

  AdmitResult b = h.admit(req("ws-day", 50));
  EXPECT_EQ(b.outcome, Outcome::kRefused);
  EXPECT_EQ(b.gate, "quota_day");
  EXPECT_EQ(b.reason, "quota");
  EXPECT_EQ(b.tokens_missing, 10);
  EXPECT_GT(b.retry_after_ms, 0);
  EXPECT_LE(b.retry_after_ms, (day.cur.end - now + 1) * 1000);
  EXPECT_EQ(count("ws-day", day), "60");
  EXPECT_EQ(count("ws-day", month), "60");

  ASSERT_EQ(h.admit(req("ws-month", 60)).outcome, Outcome::kAllowed);
  AdmitResult c = h.admit(req("ws-month", 50));
  EXPECT_EQ(c.outcome, Outcome::kRefused);
  EXPECT_EQ(c.gate, "quota");
  EXPECT_EQ(c.reason, "quota");
  EXPECT_EQ(count("ws-month", day), "60");
  EXPECT_EQ(count("ws-month", month), "60");

  AdmitRequest through_m1 = req("ws-day", 10);
  through_m1.model = "m1";
  ASSERT_EQ(h.admit(through_m1).outcome, Outcome::kAllowed);
  EXPECT_EQ(count("ws-day", day), "70");
  AdmitResult d = h.admit(through_m1);  // m1 is empty: refused in the model gate's slot
  EXPECT_EQ(d.outcome, Outcome::kRefused);
  EXPECT_EQ(d.gate, "model");
  EXPECT_EQ(count("ws-day", day), "70");
  EXPECT_EQ(count("ws-day", month), "70");
  AdmitRequest fresh = through_m1;
  fresh.tenant = "ws-fresh";
  EXPECT_EQ(h.admit(fresh).gate, "model");
  EXPECT_EQ(s.keys(keys::quota_prefix("ws-fresh") + "*"), std::vector<std::string>{});
}

// The engine declares each quota's periods from the plan's calendar: an admission on a plan with
// a quota of every period is counted in the current minute, hour, day, ISO week and month, each
// counter named after its period and expiring one period after it.
TEST_F(QuotaTest, EachPeriodIsCountedUnderItsOwnName) {
  Sync s(redis_.port());
  config::Config cfg = base_config(redis_.port());
  config::Plan plan;
  plan.quota = quotas({{Period::kMinute, 1000},
                       {Period::kHour, 10000},
                       {Period::kDay, 100000},
                       {Period::kWeek, 1000000},
                       {Period::kMonth, 10000000}});
  plan.quota_timezone = "Asia/Kathmandu";  // +05:45: an hour begins at :15 UTC
  for (int i = 0; i < 3; ++i) add_tenant(cfg, "ws-" + std::to_string(i), plan);
  Harness h(cfg);
  const auto zone = common::QuotaCalendar::load(plan.quota_timezone);
  ASSERT_TRUE(zone);
  const Period all[] = {Period::kMinute, Period::kHour, Period::kDay, Period::kWeek,
                        Period::kMonth};
  // A minute may end between the admission and the reading of the clock around it: then the
  // next tenant tries again.
  for (int i = 0; i < 3; ++i) {
    const std::string tenant = "ws-" + std::to_string(i);
    const int64_t before = s.time_s();
    AdmitResult a = h.admit(req(tenant, 7));
    ASSERT_EQ(a.outcome, Outcome::kAllowed) << a.error;
    if (s.time_s() / 60 != before / 60) continue;
    for (Period p : all) {
      const keys::Months m = keys::periods_around(*zone, p, before);
      const std::string key = keys::quota(tenant, m.cur.name);
      EXPECT_EQ(s.str({"GET", key}), "7") << key;
      EXPECT_EQ(s.str({"EXPIRETIME", key}), expire_of(m.cur)) << key;
    }
    EXPECT_EQ(s.keys(keys::quota_prefix(tenant) + "*").size(), 5u);
    EXPECT_EQ(keys::periods_around(*zone, Period::kHour, before).cur.start % 3600, 900);
    EXPECT_EQ(rem(a, "quota_minute"), 993);
    EXPECT_EQ(rem(a, "quota_week"), 1000000 - 7);
    return;
  }
  FAIL() << "three minutes ended during three admissions";
}

// Calls made by hand with the engine's own packing, their quota periods declared by the test.
struct ByHand {
  explicit ByHand(const config::Config& cfg) : tables(cfg) {}

  int64_t admit(Sync& s, const std::string& rid, int64_t tokens,
                std::initializer_list<const keys::Months*> declared) {
    Prepared p;
    AdmitRequest r = req("ws-q", tokens);
    r.request_id = rid;
    EXPECT_EQ(prepare(tables, r, rng, p), "");
    const TenantInfo& t = *p.t;
    p.time_keys.build(t.quota_prefix, t.reservations_prefix, t.res_ttl_s, t.res_ttl, s.time_s(),
                      std::span(declared.begin(), declared.size()));
    return code_of(run_call(s, AdmitCall(p)));
  }
  // settle (else charge) of rid; the reply's code.
  int64_t correct(Sync& s, bool settle, const std::string& rid, int64_t tokens,
                  std::initializer_list<const keys::Months*> declared) {
    Correction c;
    EXPECT_EQ(prepare_correction(tables, "ws-q", rid, tokens, "", "", "", c), "");
    c.time_keys.build(c.t->quota_prefix, c.t->reservations_prefix, c.t->res_ttl_s, c.t->res_ttl,
                      s.time_s(), std::span(declared.begin(), declared.size()));
    return settle ? code_of(run_call(s, SettleCall(c))) : code_of(run_call(s, ChargeCall(c)));
  }

  Tables tables;
  std::mt19937_64 rng{7};
};

// A quota resets on its own boundary while the others go on; a settle corrects each quota in
// the period of the admission when that is the current or the previous one, and leaves a quota
// whose period of the admission ended before the previous one alone (that period is over). A
// stream charge goes where the settle would correct.
TEST_F(QuotaTest, EachQuotaResetsOnItsOwnBoundaryAndIsCorrectedInItsAdmissionsPeriod) {
  Sync s(redis_.port());
  config::Config cfg = base_config(redis_.port());
  config::Plan plan;
  plan.quota = quotas({{Period::kMinute, 100}, {Period::kMonth, 1000}});
  add_tenant(cfg, "ws-q", plan);
  ByHand by_hand(cfg);
  auto count = [&](const std::string& period) {
    return s.str({"GET", keys::quota("ws-q", period)});
  };
  const int64_t t0 = s.time_s();
  ASSERT_GT(t0, 0);
  // A "minute" b that ends two seconds from now, and a month around it all.
  const keys::Months month =
      periods("m1", "m2", "m3", t0 - 5000, t0 - 1000, t0 + 100000, t0 + 200000);
  const keys::Months in_b = periods("a", "b", "c", t0 - 118, t0 - 58, t0 + 2, t0 + 62);
  ASSERT_EQ(by_hand.admit(s, "rq-1", 50, {&in_b, &month}), 1);
  ASSERT_EQ(by_hand.admit(s, "rq-2", 40, {&in_b, &month}), 1);
  // 90 + 20 > 100: the minute refuses, and the month is not charged either.
  EXPECT_EQ(by_hand.admit(s, "rq-3", 20, {&in_b, &month}), 0);
  EXPECT_EQ(count("b"), "90");
  EXPECT_EQ(count("m2"), "90");
  EXPECT_EQ(s.str({"EXPIRETIME", keys::quota("ws-q", "b")}), std::to_string(t0 + 2 + 60));

  // Past b's end: c is the current minute, b the previous one.
  while (s.time_s() < t0 + 2) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const keys::Months in_c = periods("b", "c", "d", t0 - 58, t0 + 2, t0 + 62, t0 + 122);
  ASSERT_EQ(by_hand.admit(s, "rq-3", 20, {&in_c, &month}), 1);
  EXPECT_EQ(count("c"), "20");
  EXPECT_EQ(count("b"), "90");
  EXPECT_EQ(count("m2"), "110");
  // rq-1 was admitted in b: its correction (+30) goes to b, not to the current minute.
  ASSERT_EQ(by_hand.correct(s, true, "rq-1", 80, {&in_c, &month}), 1);
  EXPECT_EQ(count("b"), "120");
  EXPECT_EQ(count("c"), "20");
  EXPECT_EQ(count("m2"), "140");
  // A stream charge of rq-3 (admitted in c) goes to c.
  ASSERT_EQ(by_hand.correct(s, false, "rq-3", 5, {&in_c, &month}), 1);
  EXPECT_EQ(count("c"), "25");
  EXPECT_EQ(count("m2"), "145");
  // Declared a minute later, b is before the previous minute: rq-2's correction (-30) reaches
  // the month alone.
  const int64_t t1 = s.time_s();
  const keys::Months later = periods("c", "d", "e", t0 + 2, t1, t1 + 60, t1 + 120);
  ASSERT_EQ(by_hand.correct(s, true, "rq-2", 10, {&later, &month}), 1);
  EXPECT_EQ(count("b"), "120");
  EXPECT_EQ(count("m2"), "115");
  EXPECT_EQ(s.str({"EXISTS", keys::quota("ws-q", "d")}), "0");
}

// A journaled local decision is reconciled into each quota's counter of its period, with the
// expiry the record carries, once.
TEST_F(QuotaTest, ReconcileChargesEveryQuotaOnce) {
  Sync s(redis_.port());
  const int64_t now = s.time_s();
  ReconcileRecord r;
  r.seq = "1";
  r.applied_key = keys::applied("ws-r", "j1");
  r.tokens = 25;
  r.quotas = {{keys::quota("ws-r", "2026-12-07"), std::to_string(now + 86400)},
              {keys::quota("ws-r", "2026-12"), std::to_string(now + 40 * 86400)}};
  const ReconcileRecord records[] = {r};
  for (int i = 0; i < 2; ++i) {
    redisReply* reply = run_call(s, ReconcileCall(records));
    ASSERT_TRUE(reply && reply->type == REDIS_REPLY_INTEGER);
    EXPECT_EQ(reply->integer, i == 0 ? 1 : 0);
    freeReplyObject(reply);
  }
  EXPECT_EQ(s.str({"GET", keys::quota("ws-r", "2026-12-07")}), "25");
  EXPECT_EQ(s.str({"GET", keys::quota("ws-r", "2026-12")}), "25");
  EXPECT_EQ(s.str({"EXPIRETIME", keys::quota("ws-r", "2026-12-07")}), std::to_string(now + 86400));
  EXPECT_EQ(s.str({"EXPIRETIME", keys::quota("ws-r", "2026-12")}),
            std::to_string(now + 40 * 86400));
}

}  // namespace
}  // namespace dripgate::control
