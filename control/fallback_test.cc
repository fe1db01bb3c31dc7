// Local decisions without Redis (redis.on_failure: local) on an injected clock: the limiter's
// shares, the journal on disk and its read-back after a restart, and the claim that lets one
// worker at a time reconcile.
#include "control/fallback.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include "config/config.h"
#include "control/keys.h"

namespace dripgate::control {
namespace {

LocalBucket bucket(const std::string& key, double cap, double refill) {
  return LocalBucket{key, "tenant", cap, refill};
}

LocalAdmit request(const std::string& rid, int64_t tokens = 0) {
  LocalAdmit a;
  a.tenant = "t";
  a.request_id = rid;
  a.tokens = tokens;
  a.reservation_ttl_ms = 60'000;
  a.month = "2026-12";
  a.month_end = 1798761600;
  return a;
}

TEST(LocalLimiter, BucketsRefillAtTheirRateAndAreAllOrNothing) {
  LocalLimiter l;
  int64_t now = 1'000'000;
  auto a = [&](const std::string& rid) {
    LocalAdmit r = request(rid);
    r.buckets = {bucket("b1", 2, 1), bucket("b2", 5, 1)};
    return l.admit(r, now);
  };
  EXPECT_TRUE(a("r1").allowed);
  EXPECT_TRUE(a("r2").allowed);
  LocalVerdict v = a("r3");
  ASSERT_FALSE(v.allowed);
  EXPECT_EQ(v.gate, "tenant");
  EXPECT_EQ(v.reason, "rate");
  EXPECT_EQ(v.retry_after_ms, 1000);
  // The refusal took nothing from b2: 3 tokens left there, as after two admissions.
  ASSERT_EQ(v.remaining.size(), 2u);
  EXPECT_DOUBLE_EQ(v.remaining[1].value, 3);
  now += 500;
  EXPECT_FALSE(a("r4").allowed);
  now += 500;
  EXPECT_TRUE(a("r5").allowed);
}

TEST(LocalLimiter, QuotaIsChargedAgainstTheAllowanceAndSettleMovesIt) {
  LocalLimiter l;
  int64_t now = 5'000;
  LocalAdmit r = request("r1", 60);
  r.allowance = 100;
  ASSERT_TRUE(l.admit(r, now).allowed);
  r.request_id = "r2";
  LocalVerdict v = l.admit(r, now);
  ASSERT_FALSE(v.allowed);
  EXPECT_EQ(v.gate, "quota");
  // Settled below the estimate: the difference goes back to the allowance.
  std::optional<LocalSettle> s = l.settle("r1", 10, now);
  ASSERT_TRUE(s);
  EXPECT_TRUE(s->first);
  EXPECT_EQ(s->delta, -50);
  EXPECT_EQ(s->charged, 10);
  EXPECT_EQ(s->remaining, 90);
  EXPECT_TRUE(l.admit(r, now).allowed);
  // Once only; an id this daemon never admitted is Redis's.
  s = l.settle("r1", 99, now);
  ASSERT_TRUE(s);
  EXPECT_FALSE(s->first);
  EXPECT_EQ(s->delta, 0);
  EXPECT_EQ(s->charged, 10);
  EXPECT_FALSE(l.settle("elsewhere", 1, now));
  // Past its time a reservation cannot be settled: the estimate stays charged.
  s = l.settle("r2", 1, now + 60'000);
  ASSERT_TRUE(s);
  EXPECT_FALSE(s->first);
  EXPECT_EQ(s->charged, 60);
}

TEST(LocalLimiter, LeasesCapStreamsUntilReleasedOrExpired) {
  LocalLimiter l;
  int64_t now = 0;
  LocalAdmit r = request("r1");
  r.max_streams = 1;
  r.lease_ms = 10'000;
  ASSERT_TRUE(l.admit(r, now).allowed);
  r.request_id = "r2";
  LocalVerdict v = l.admit(r, now + 1000);
  ASSERT_FALSE(v.allowed);
  EXPECT_EQ(v.gate, "concurrency");
  EXPECT_EQ(v.retry_after_ms, 9000);
  EXPECT_EQ(l.release("r1", now + 2000), std::optional<bool>(true));
  EXPECT_FALSE(l.release("r1", now + 2000));
  EXPECT_TRUE(l.admit(r, now + 2000).allowed);
  r.request_id = "r3";
  EXPECT_TRUE(l.admit(r, now + 12'001).allowed);  // r2's lease ended by itself
}

class FallbackTest : public ::testing::Test {
 protected:
  FallbackTest() {
    char tmpl[] = "/tmp/dripgate-fallback-test-XXXXXX";
    dir_ = mkdtemp(tmpl);
    path_ = dir_ + "/journal";
    auto loaded = config::load_string(R"(
redis: { on_failure: local, local_share: 0.25, journal: /unused }
plans:
  pro:
    gates: { tenant: { capacity: 8, refill_per_s: 4 } }
    quota: { tokens_per_month: 1000 }
tenants:
  t: { plan: pro }
global_gates:
  model: { big: { capacity: 40, refill_per_s: 4 } }
)",
                                      "t.yaml");
    for (const auto& e : loaded.errors) ADD_FAILURE() << e.str();
    snap_ = std::make_shared<const Snapshot>(*loaded.config, "");
  }
  ~FallbackTest() override { std::filesystem::remove_all(dir_); }

  std::unique_ptr<Fallback> open() {
    std::string why;
    auto f = Fallback::open(path_, &why, [this] { return now_; });
    EXPECT_TRUE(f) << why;
    return f;
  }
  AdmitResult admit(Fallback& f, int64_t tokens, const std::string& model = "") {
    AdmitRequest req;
    req.tenant = "t";
    req.tokens = tokens;
    req.model = model;
    return f.admit(*snap_, req, rng_);
  }
  std::string file() {
    std::ifstream in(path_);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }

  std::string dir_, path_;
  int64_t now_ = 1'764'633'600'000;
  std::mt19937_64 rng_{7};
  std::shared_ptr<const Snapshot> snap_;
};

TEST_F(FallbackTest, AdmitsOnTheShareAndJournalsEveryDecision) {
  auto f = open();
  // A quarter of the tenant bucket (8): 2 admissions, then refused until it refills.
  AdmitResult a = admit(*f, 100);
  ASSERT_EQ(a.outcome, Outcome::kAllowed) << a.error;
  EXPECT_EQ(a.degraded, "local");
  EXPECT_EQ(a.request_id.rfind("t.", 0), 0u);
  ASSERT_EQ(admit(*f, 100).outcome, Outcome::kAllowed);
  AdmitResult r = admit(*f, 10);  // within the quota allowance: the bucket refuses
  ASSERT_EQ(r.outcome, Outcome::kRefused);
  EXPECT_EQ(r.gate, "tenant");
  EXPECT_EQ(r.retry_after_ms, 1000);  // 1 token at a quarter of 4/s
  EXPECT_EQ(f->pending(), 2u);
  // The quota allowance: a quarter of 1000, with 200 reserved already.
  now_ += 10'000;
  AdmitResult q = admit(*f, 51);
  ASSERT_EQ(q.outcome, Outcome::kRefused);
  EXPECT_EQ(q.reason, "quota");
  EXPECT_EQ(q.tokens_missing, 1);
  // Settled locally, and journaled as the difference to the estimate.
  std::optional<SettleResult> s = f->settle(a.request_id, 30);
  ASSERT_TRUE(s);
  EXPECT_TRUE(s->settled);
  EXPECT_EQ(s->charged, 30);
  EXPECT_EQ(s->remaining, 250 - 130);
  EXPECT_EQ(f->pending(), 3u);
  // A settle of a reservation Redis holds is kept for Redis.
  SettleResult d = f->defer_settle("t", "t.0123456789abcdef", 7);
  EXPECT_EQ(d.outcome, Outcome::kAllowed);
  EXPECT_EQ(f->pending(), 4u);
  EXPECT_NE(file().find("\"op\":\"resettle\""), std::string::npos) << file();
}

TEST_F(FallbackTest, ARestartedDaemonKeepsItsReservationsAndPendingRecords) {
  std::string rid;
  std::string journal_id;
  {
    auto f = open();
    journal_id = f->journal_id();
    AdmitResult a = admit(*f, 200, "big");
    ASSERT_EQ(a.outcome, Outcome::kAllowed) << a.error;
    rid = a.request_id;
    ASSERT_EQ(admit(*f, 40).outcome, Outcome::kAllowed);
  }
  auto f = open();
  EXPECT_EQ(f->journal_id(), journal_id);
  EXPECT_EQ(f->pending(), 2u);
  EXPECT_TRUE(f->any_open());
  // The reservation came back: its settle is still local, and the allowance still holds the
  // 240 reserved before the restart.
  std::optional<SettleResult> s = f->settle(rid, 150);
  ASSERT_TRUE(s);
  EXPECT_TRUE(s->settled);
  EXPECT_EQ(s->remaining, 250 - 190);
  // Claimed by one worker at a time; applied records leave the journal.
  std::vector<JournalRecord> batch = f->claim(10);
  ASSERT_EQ(batch.size(), 3u);
  EXPECT_EQ(batch[0].op, JournalRecord::Op::kAdmit);
  ASSERT_EQ(batch[0].globals.size(), 1u);
  EXPECT_EQ(batch[0].globals[0].bucket.key, keys::global_bucket("model", "big"));
  EXPECT_EQ(batch[0].globals[0].bucket.capacity, "40");  // the full limit, not the share
  EXPECT_EQ(batch[2].op, JournalRecord::Op::kSettle);
  EXPECT_EQ(batch[2].tokens, -50);
  EXPECT_TRUE(f->claim(10).empty());
  for (const auto& r : batch) f->reconciled(r.seq);
  f->end_batch();
  EXPECT_EQ(f->pending(), 0u);
  // Nothing pending, but reservations open: the journal stays until they expire.
  EXPECT_TRUE(f->claim(10).empty());
  EXPECT_NE(file().find(rid), std::string::npos);
  now_ += 601'000;
  EXPECT_TRUE(f->claim(10).empty());
  EXPECT_FALSE(f->any_open());
  EXPECT_EQ(file(), "{\"journal\":\"" + journal_id + "\",\"next\":4}\n");
  // After a compaction, ids go on from where they were.
  ASSERT_EQ(admit(*f, 1).outcome, Outcome::kAllowed);
  batch = f->claim(10);
  ASSERT_EQ(batch.size(), 1u);
  EXPECT_EQ(batch[0].seq, 4u);
}

TEST_F(FallbackTest, ATornLastLineIsSkipped) {
  {
    auto f = open();
    ASSERT_EQ(admit(*f, 1).outcome, Outcome::kAllowed);
  }
  std::ofstream(path_, std::ios::app) << "{\"seq\":2,\"op\":\"adm";
  auto f = open();
  EXPECT_EQ(f->pending(), 1u);
}

// The allowance is the share of what Redis last reported left, not of the month's budget.
TEST_F(FallbackTest, TheAllowanceIsAShareOfTheQuotaRedisReportedLeft) {
  auto f = open();
  f->quota_left("t", 40);
  AdmitResult r = admit(*f, 11);
  ASSERT_EQ(r.outcome, Outcome::kRefused);
  EXPECT_EQ(r.reason, "quota");
  ASSERT_EQ(admit(*f, 10).outcome, Outcome::kAllowed);
  // Redis answers again with more left (a new month): the next outage starts from that.
  f->quota_left("t", 400);
  EXPECT_EQ(admit(*f, 100).outcome, Outcome::kAllowed);
}

TEST_F(FallbackTest, OneDaemonPerJournal) {
  auto f = open();
  std::string why;
  EXPECT_FALSE(Fallback::open(path_, &why));
  EXPECT_EQ(why,
            "the journal " + path_ + " is in use by another process: give each daemon its own");
  f.reset();
  EXPECT_TRUE(Fallback::open(path_, &why)) << why;
}

TEST(FailureMode, ThePlanOverridesTheDefault) {
  auto loaded = config::load_string(R"(
redis: { on_failure: open }
plans: { a: {}, b: { on_failure: closed } }
tenants: { ta: { plan: a }, tb: { plan: b }, "*": { plan: b } }
)",
                                    "t.yaml");
  ASSERT_TRUE(loaded.config);
  EXPECT_EQ(failure_mode(*loaded.config, "ta"), config::OnFailure::kOpen);
  EXPECT_EQ(failure_mode(*loaded.config, "tb"), config::OnFailure::kClosed);
  EXPECT_EQ(failure_mode(*loaded.config, "unlisted"), config::OnFailure::kClosed);
}

}  // namespace
}  // namespace dripgate::control
