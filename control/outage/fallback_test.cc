// Local decisions without Redis (redis.on_failure: local) on an injected clock: the limiter's
// shares, shadow gates, the brake, token-rate gates and stream charges, the journal on disk and
// its read-back after a restart, and the claim that lets one worker at a time reconcile. Then
// through a Gateway on a real redis-server, stopped for the outage and started again: what the
// reconciliation leaves in Redis.
#include "control/outage/fallback.h"

#include <gtest/gtest.h>
#include <hiredis/hiredis.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>

#include "config/config.h"
#include "control/admission/keys.h"
#include "control/gateway/gateway.h"
#include "tests/event_loop.h"
#include "tests/redis_server.h"

namespace dripgate::control {
namespace {

using namespace std::chrono_literals;

LocalBucket bucket(const std::string& key, double cap, double refill) {
  LocalBucket b;
  b.key = key;
  b.gate = "tenant";
  b.capacity = cap;
  b.refill = refill;
  return b;
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

// A settled reservation keeps what a repeated settle and a later charge are answered from, in
// a few bytes, until its time; then nothing is left of it.
TEST(LocalLimiter, ASettledReservationShrinksAndGoesAtItsTime) {
  LocalLimiter l;
  int64_t now = 5'000;
  LocalAdmit r = request("t.0123456789abcdef", 60);
  r.allowance = 100;
  ASSERT_TRUE(l.admit(r, now).allowed);
  EXPECT_EQ(l.bytes(), LocalLimiter::kEntryBytes);
  ASSERT_TRUE(l.settle(r.request_id, 30, now));
  EXPECT_EQ(l.open(), 0u);
  EXPECT_EQ(l.settled(), 1u);
  EXPECT_EQ(l.bytes(), LocalLimiter::kSettledBytes);
  EXPECT_EQ(l.oldest_unsettled(), UINT64_MAX);
  std::optional<LocalSettle> s = l.settle(r.request_id, 99, now + 59'999);
  ASSERT_TRUE(s);
  EXPECT_FALSE(s->first);
  EXPECT_EQ(s->charged, 30);
  EXPECT_EQ(s->remaining, 70);
  std::optional<LocalCharge> c = l.charge(r.request_id, 5, now + 59'999);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->code, LocalCharge::Code::kSettled);
  EXPECT_TRUE(l.is_local(r.request_id));
  EXPECT_FALSE(l.is_local("t.0123456789abcdeg"));
  EXPECT_FALSE(l.settle("t.0123456789abcdeg", 1, now));
  l.sweep(now + 59'999);
  EXPECT_EQ(l.settled(), 1u);
  l.sweep(now + 60'000);
  EXPECT_EQ(l.settled(), 0u);
  EXPECT_EQ(l.bytes(), 0u);
  EXPECT_FALSE(l.is_local(r.request_id));
  EXPECT_FALSE(l.settle(r.request_id, 1, now + 60'000));
  // A settle played back after a restart leaves the same.
  LocalLimiter back;
  back.restore_admit(r, now, now);
  back.restore_settle(r.request_id, -30);
  EXPECT_EQ(back.bytes(), LocalLimiter::kSettledBytes);
  s = back.settle(r.request_id, 1, now);
  ASSERT_TRUE(s);
  EXPECT_FALSE(s->first);
  EXPECT_EQ(s->charged, 30);
}

// The same id hashes the same each time (the MAC is initialised afresh per call); another
// process's key, another hash.
TEST(KeyedHash, StableUnderOneKeyDifferentUnderAnother) {
  KeyedHash a, b;
  const uint64_t first = a("t.0123456789abcdef");
  a("something else");
  EXPECT_EQ(a("t.0123456789abcdef"), first);
  EXPECT_NE(a("t.0123456789abcdeg"), first);
  EXPECT_NE(b("t.0123456789abcdef"), first);
  EXPECT_NE(a(""), b(""));
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

// Every pending record, as reconciliation would take them (batch after batch, each marked in
// Redis), in journal order.
std::vector<JournalRecord> drain(Fallback& f) {
  std::vector<JournalRecord> all;
  for (std::vector<JournalRecord> batch; !(batch = f.claim(10)).empty();) {
    for (const JournalRecord& r : batch) {
      f.reconciled(r.seq);
      all.push_back(r);
    }
    f.end_batch();
  }
  std::sort(all.begin(), all.end(), [](const auto& a, const auto& b) { return a.seq < b.seq; });
  return all;
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

  std::unique_ptr<Fallback> open(FallbackOptions options = {}) {
    std::string why;
    auto f = Fallback::open(
        path_, &why, [this] { return now_; }, std::move(options));
    EXPECT_TRUE(f) << why;
    return f;
  }
  // The journal's segment files after the first: <path>.<n>.
  size_t later_segments() {
    size_t n = 0;
    for (const auto& e : std::filesystem::directory_iterator(dir_))
      n += e.path().filename().string().starts_with("journal.");
    return n;
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
  SettleResult d = f->defer_settle(SettleRequest{"t", "t.0123456789abcdef", 7});
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
  EXPECT_TRUE(f->any_local());
  // The reservation came back: its settle is still local, and the allowance still holds the
  // 240 reserved before the restart.
  std::optional<SettleResult> s = f->settle(rid, 150);
  ASSERT_TRUE(s);
  EXPECT_TRUE(s->settled);
  EXPECT_EQ(s->remaining, 250 - 190);
  // Claimed by one worker at a time; applied records leave the journal.
  std::vector<JournalRecord> batch = f->claim(10);
  // The settle waits for the next batch: its admission is in this one (they go out together).
  ASSERT_EQ(batch.size(), 2u);
  EXPECT_EQ(batch[0].op, JournalRecord::Op::kAdmit);
  ASSERT_EQ(batch[0].globals.size(), 1u);
  EXPECT_EQ(batch[0].globals[0].bucket.key, keys::global_bucket("model", "big"));
  EXPECT_EQ(batch[0].globals[0].bucket.capacity, "40");  // the full limit, not the share
  EXPECT_TRUE(f->claim(10).empty());
  for (const auto& r : batch) f->reconciled(r.seq);
  f->end_batch();
  batch = f->claim(10);
  ASSERT_EQ(batch.size(), 1u);
  EXPECT_EQ(batch[0].op, JournalRecord::Op::kSettle);
  EXPECT_EQ(batch[0].tokens, -50);
  f->reconciled(batch[0].seq);
  f->end_batch();
  EXPECT_EQ(f->pending(), 0u);
  // Nothing pending, but reservations open: the journal stays until they expire.
  EXPECT_TRUE(f->claim(10).empty());
  EXPECT_NE(file().find(rid), std::string::npos);
  now_ += 601'000;
  EXPECT_TRUE(f->claim(10).empty());
  EXPECT_FALSE(f->any_local());
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

// Past segment_bytes the journal goes on in <path>.1, .2, ...; a restart reads every segment;
// once their records are in Redis and their reservations settled, the segments go and the
// memory counted for the records is 0 again.
TEST_F(FallbackTest, SegmentsRotateAndGoOnceReconciled) {
  FallbackOptions o;
  o.journal.segment_bytes = 1024;
  o.journal.sync = JournalOptions::Sync::kNever;
  std::vector<std::string> rids;
  std::string id;
  {
    auto f = open(o);
    id = f->journal_id();
    for (int i = 0; i < 12; ++i) {
      now_ += 1000;  // the local bucket (2, refilling 1/s) lets one through a second
      AdmitResult a = admit(*f, 1);
      ASSERT_EQ(a.outcome, Outcome::kAllowed) << a.error;
      rids.push_back(a.request_id);
    }
    EXPECT_GE(f->segments(), 3u);
  }
  EXPECT_GE(later_segments(), 2u);
  auto f = open(o);
  EXPECT_EQ(f->journal_id(), id);
  EXPECT_EQ(f->pending(), 12u);
  // In memory a pending record is its place in its segment, read back when it is sent; each
  // reservation is counted too.
  EXPECT_EQ(f->pending_bytes(), 12 * (Journal::kIndexBytes + LocalLimiter::kEntryBytes));
  for (const std::string& rid : rids) ASSERT_TRUE(f->settle(rid, 1));
  drain(*f);
  EXPECT_EQ(f->pending(), 0u);
  EXPECT_EQ(f->pending_bytes(), 12 * LocalLimiter::kSettledBytes);
  // Settled reservations stay, compact, until their time (a repeated settle is answered) but
  // hold no segment.
  EXPECT_TRUE(f->any_local());
  EXPECT_TRUE(f->claim(8).empty());
  EXPECT_EQ(f->segments(), 1u);
  EXPECT_LE(later_segments(), 1u);
  EXPECT_LT(f->disk_bytes(), 100u);  // a header line
  // Ids go on from where they were, in a journal that reads back whole.
  ASSERT_EQ(admit(*f, 1).outcome, Outcome::kAllowed);
  f.reset();
  f = open(o);
  EXPECT_EQ(f->pending(), 1u);
  EXPECT_EQ(f->claim(8).at(0).seq, 25u);  // 12 admissions, 12 settles before it
}

// A reservation not yet settled keeps its admission's segment, which a restart needs to settle
// it exactly; its settle lets the segment go.
TEST_F(FallbackTest, AnUnsettledReservationKeepsItsSegment) {
  FallbackOptions o;
  o.journal.segment_bytes = 1024;
  auto f = open(o);
  AdmitResult held = admit(*f, 5);
  ASSERT_EQ(held.outcome, Outcome::kAllowed);
  for (int i = 0; i < 6; ++i) {
    now_ += 1000;
    AdmitResult a = admit(*f, 1);
    ASSERT_EQ(a.outcome, Outcome::kAllowed) << a.error;
    ASSERT_TRUE(f->settle(a.request_id, 1));
  }
  drain(*f);
  EXPECT_GE(f->segments(), 2u);
  EXPECT_NE(file().find(held.request_id), std::string::npos);
  ASSERT_TRUE(f->settle(held.request_id, 2));
  drain(*f);
  EXPECT_EQ(f->segments(), 1u);
  EXPECT_EQ(file().find(held.request_id), std::string::npos);
}

// Past journal_max_mb a new local admission is decided as journal_full says; corrections of
// admissions already made are still journaled; below it again, local decisions resume.
TEST_F(FallbackTest, PastItsBoundTheJournalTakesNoNewAdmission) {
  FallbackOptions o;
  // One admission (its record and its reservation) fills it; its reservation alone does not.
  o.max_bytes = LocalLimiter::kEntryBytes + 16;
  auto f = open(o);
  AdmitResult a = admit(*f, 5);
  ASSERT_EQ(a.outcome, Outcome::kAllowed) << a.error;
  now_ += 1000;
  AdmitResult full = admit(*f, 5);
  EXPECT_EQ(full.outcome, Outcome::kUnavailable);
  EXPECT_EQ(full.error, "redis: unavailable, and the local decisions hold redis.journal_max_mb");
  EXPECT_EQ(f->pending(), 1u);
  std::optional<SettleResult> s = f->settle(a.request_id, 4);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->outcome, Outcome::kAllowed);
  EXPECT_EQ(f->pending(), 2u);
  f.reset();
  // Restarted with a bound its two records and the settled reservation fill.
  o.max_bytes = 2 * Journal::kIndexBytes + LocalLimiter::kSettledBytes;
  o.full_mode = config::OnFailure::kOpen;
  f = open(o);
  EXPECT_EQ(f->pending_bytes(), o.max_bytes);
  AdmitResult open_admitted = admit(*f, 5);
  EXPECT_EQ(open_admitted.outcome, Outcome::kAllowed);
  EXPECT_EQ(open_admitted.degraded, "open");
  EXPECT_EQ(f->pending(), 2u);  // not journaled: nothing to charge later
  drain(*f);
  AdmitResult local = admit(*f, 5);
  EXPECT_EQ(local.degraded, "local");
  EXPECT_EQ(f->pending(), 1u);
}

// A settle Redis missed keeps the whole request, so that every token-rate gate it names is
// corrected when it is sent.
TEST_F(FallbackTest, ADeferredSettleKeepsTheWholeRequest) {
  {
    auto f = open();
    SettleRequest req{"t", "t.0123456789abcdef", 7, "u", "k", "m"};
    ASSERT_EQ(f->defer_settle(req).outcome, Outcome::kAllowed);
  }
  auto f = open();
  std::vector<JournalRecord> batch = f->claim(8);
  ASSERT_EQ(batch.size(), 1u);
  EXPECT_EQ(batch[0].op, JournalRecord::Op::kResettle);
  EXPECT_EQ(batch[0].user, "u");
  EXPECT_EQ(batch[0].api_key, "k");
  EXPECT_EQ(batch[0].model, "m");
  EXPECT_EQ(batch[0].tokens, 7);
}

TEST(ReconcilePace, FollowsRedisAnswerTime) {
  ReconcilePace p;
  const size_t start = p.size();
  p.answered(ReconcilePace::kTargetUs / 2);
  EXPECT_EQ(p.size(), start * 2);
  p.answered(ReconcilePace::kTargetUs * 3 / 2);  // within twice the target: kept
  EXPECT_EQ(p.size(), start * 2);
  p.answered(ReconcilePace::kTargetUs * 3);
  EXPECT_EQ(p.size(), start);
  for (int i = 0; i < 40; ++i) p.answered(1);
  EXPECT_EQ(p.size(), ReconcilePace::kMax);
  for (int i = 0; i < 40; ++i) p.answered(ReconcilePace::kTargetUs * 10);
  EXPECT_EQ(p.size(), ReconcilePace::kMin);
}

// A second configuration: shadow gates (a gate's own and a whole plan's), token-rate gates, a
// plan the brake exempts; a share of a half.
constexpr char kGates[] = R"(
redis: { on_failure: local, local_share: 0.5, journal: /unused }
plans:
  pro:
    gates:
      tenant: { capacity: 8, refill_per_s: 0.001 }
      user: { capacity: 2, refill_per_s: 0.001, mode: shadow }
      tenant_tokens: { capacity: 1000, refill_per_s: 0.001 }
    quota: { tokens_per_month: 100000 }
    concurrency: { max_streams: 20, lease_s: 60 }
  trial:
    mode: shadow
    gates: { tenant: { capacity: 2, refill_per_s: 0.001 } }
    quota: { tokens_per_month: 100 }
  vip:
    gates: { tenant: { capacity: 8, refill_per_s: 0.001 } }
  quiet:
    on_failure: closed
tenants:
  t: { plan: pro }
  tr: { plan: trial }
  v: { plan: vip }
global_gates:
  model_tokens: { m: { capacity: 2000, refill_per_s: 0.001 } }
  ip: { capacity: 4, refill_per_s: 0.001 }
)";

std::shared_ptr<const Snapshot> snapshot_of(const std::string& yaml) {
  auto loaded = config::load_string(yaml, "t.yaml");
  for (const auto& e : loaded.errors) ADD_FAILURE() << e.str();
  return std::make_shared<const Snapshot>(*loaded.config, "");
}

class LocalGatesTest : public FallbackTest {
 protected:
  LocalGatesTest() { snap_ = snapshot_of(kGates); }
  AdmitResult admit_as(Fallback& f, const std::string& tenant, int64_t tokens = 0,
                       const std::string& user = "", const Brake* brake = nullptr,
                       const TenantDirectory* registry = nullptr) {
    AdmitRequest req;
    req.tenant = tenant;
    req.tokens = tokens;
    req.user = user;
    return f.admit(*snap_, req, rng_, registry, brake);
  }
  // The bucket of `gate` in a journaled record.
  static const JournalRecord::Bucket* bucket_of(const JournalRecord& r, const std::string& gate) {
    for (const auto& b : r.buckets)
      if (b.gate == gate) return &b;
    for (const auto& g : r.globals)
      if (g.bucket.gate == gate) return &g.bucket;
    return nullptr;
  }
};

TEST_F(LocalGatesTest, AShadowGateConsumesAdmitsAndNamesItself) {
  auto f = open();
  // The user gate (shadow) holds 1 locally: the first takes it, the second is admitted all
  // the same and names it.
  AdmitResult a = admit_as(*f, "t", 0, "u");
  ASSERT_EQ(a.outcome, Outcome::kAllowed) << a.error;
  EXPECT_EQ(a.shadow_refused, "");
  AdmitResult b = admit_as(*f, "t", 0, "u");
  ASSERT_EQ(b.outcome, Outcome::kAllowed) << b.error;
  EXPECT_EQ(b.shadow_refused, "user");
  EXPECT_GT(b.shadow_retry_ms, 0);
  // The tenant gate (enforced, 4 locally) refuses the fifth: a refusal names no shadow gate.
  ASSERT_EQ(admit_as(*f, "t", 0, "u").outcome, Outcome::kAllowed);
  ASSERT_EQ(admit_as(*f, "t", 0, "u").outcome, Outcome::kAllowed);
  AdmitResult r = admit_as(*f, "t", 0, "u");
  ASSERT_EQ(r.outcome, Outcome::kRefused);
  EXPECT_EQ(r.gate, "tenant");
  EXPECT_EQ(r.shadow_refused, "");
  // The journal says what each bucket took: the empty shadow bucket gave nothing.
  std::vector<JournalRecord> batch = f->claim(10);
  ASSERT_EQ(batch.size(), 4u);
  ASSERT_TRUE(bucket_of(batch[0], "user"));
  EXPECT_EQ(bucket_of(batch[0], "user")->cost, "1");
  EXPECT_EQ(bucket_of(batch[1], "user")->cost, "0");
  EXPECT_EQ(bucket_of(batch[1], "tenant")->cost, "1");
  EXPECT_EQ(bucket_of(batch[1], "tenant")->capacity, "8");
}

TEST_F(LocalGatesTest, AShadowPlanNeverRefusesAndNamesTheLongestWait) {
  auto f = open();
  // Its tenant bucket holds 1 locally, its quota allowance 50.
  AdmitResult a = admit_as(*f, "tr", 10);
  ASSERT_EQ(a.outcome, Outcome::kAllowed) << a.error;
  EXPECT_EQ(a.shadow_refused, "");
  AdmitResult b = admit_as(*f, "tr", 10);
  ASSERT_EQ(b.outcome, Outcome::kAllowed);
  EXPECT_EQ(b.shadow_refused, "tenant");
  // Past the allowance too: the quota's wait (the month) is the longest.
  AdmitResult c = admit_as(*f, "tr", 45);
  ASSERT_EQ(c.outcome, Outcome::kAllowed);
  EXPECT_EQ(c.shadow_refused, "quota");
  // A shadow quota still counts what the admitted requests reserved.
  ASSERT_EQ(c.remaining.back().gate, "quota");
  EXPECT_EQ(c.remaining.back().value, 0);
}

TEST_F(LocalGatesTest, TheBrakeScalesTheEnforcedLocalShares) {
  auto f = open();
  const Brake brake{0.5, {}, 60};
  // The vip tenant bucket: 8 × 0.5 (share) × 0.5 (brake) = 2.
  AdmitResult a = admit_as(*f, "v", 0, "", &brake);
  ASSERT_EQ(a.outcome, Outcome::kAllowed) << a.error;
  EXPECT_EQ(a.brake, 0.5);
  ASSERT_EQ(admit_as(*f, "v", 0, "", &brake).outcome, Outcome::kAllowed);
  AdmitResult r = admit_as(*f, "v", 0, "", &brake);
  ASSERT_EQ(r.outcome, Outcome::kRefused);
  EXPECT_EQ(r.gate, "tenant");
  EXPECT_EQ(r.remaining[0].limit, 2);
  // The journal keeps the plan's limits: reconciliation charges what was admitted.
  std::vector<JournalRecord> batch = f->claim(10);
  ASSERT_EQ(batch.size(), 2u);
  EXPECT_EQ(bucket_of(batch[0], "tenant")->capacity, "8");
  f->end_batch();
  // An exempt plan is not braked; a shadow gate is not either (user holds its unbraked 1: the
  // first takes it without a report).
  const Brake exempt{0.5, {"pro"}, 60};
  AdmitResult e = admit_as(*f, "t", 0, "", &exempt);
  ASSERT_EQ(e.outcome, Outcome::kAllowed);
  EXPECT_EQ(e.brake, 1);
  EXPECT_EQ(e.remaining[0].limit, 4);
  AdmitResult s = admit_as(*f, "t", 0, "u", &brake);  // the tenant bucket: 3 left, read as 2
  ASSERT_EQ(s.outcome, Outcome::kAllowed);
  EXPECT_EQ(s.shadow_refused, "");
  EXPECT_EQ(s.brake, 0.5);
  EXPECT_EQ(admit_as(*f, "t", 0, "", &brake).outcome, Outcome::kAllowed);
  EXPECT_EQ(admit_as(*f, "t", 0, "", &brake).outcome, Outcome::kRefused);
}

TEST_F(LocalGatesTest, AnEstimateAboveTheShareIsARateRefusalAboveTheCapacityA400) {
  auto f = open();
  // tenant_tokens: 1000, 500 locally.
  AdmitResult r = admit_as(*f, "t", 600);
  ASSERT_EQ(r.outcome, Outcome::kRefused) << r.error;
  EXPECT_EQ(r.gate, "tenant_tokens");
  EXPECT_EQ(r.reason, "rate");
  EXPECT_GE(r.retry_after_ms, 1000);
  AdmitResult b = admit_as(*f, "t", 1001);
  EXPECT_EQ(b.outcome, Outcome::kBadRequest);
  EXPECT_EQ(b.error.rfind("tokens: 1001 exceeds the capacity 1000", 0), 0u) << b.error;
  EXPECT_EQ(admit_as(*f, "t", 500).outcome, Outcome::kAllowed);
}

TEST_F(LocalGatesTest, ATokenRateGateTakesTheEstimateAndSettleCorrectsIt) {
  auto f = open();
  AdmitResult a = admit_as(*f, "t", 300);
  ASSERT_EQ(a.outcome, Outcome::kAllowed) << a.error;
  ASSERT_EQ(a.remaining[1].gate, "tenant_tokens");
  EXPECT_NEAR(a.remaining[1].value, 200, 0.01);
  // Used 100: 200 back locally, journaled as the correction of its token-rate bucket.
  ASSERT_TRUE(f->settle(a.request_id, 100));
  AdmitResult b = admit_as(*f, "t", 400);
  ASSERT_EQ(b.outcome, Outcome::kAllowed) << b.error;
  std::vector<JournalRecord> batch = drain(*f);
  ASSERT_EQ(batch.size(), 3u);
  EXPECT_EQ(bucket_of(batch[0], "tenant_tokens")->cost, "300");
  EXPECT_EQ(bucket_of(batch[0], "tenant")->cost, "1");
  ASSERT_EQ(batch[1].op, JournalRecord::Op::kSettle);
  EXPECT_EQ(batch[1].tokens, -200);
  ASSERT_EQ(batch[1].buckets.size(), 1u);
  EXPECT_EQ(batch[1].buckets[0].cost, "-200");
  EXPECT_EQ(batch[1].buckets[0].key, keys::bucket("t", "tenant_tokens"));
}

TEST_F(LocalGatesTest, ALocalChargeIsCharge_luasAnswers) {
  auto f = open();
  AdmitResult a = admit_as(*f, "t", 100);
  ASSERT_EQ(a.outcome, Outcome::kAllowed) << a.error;
  std::optional<ChargeResult> c = f->charge(a.request_id, 50);
  ASSERT_TRUE(c);
  ASSERT_EQ(c->outcome, Outcome::kAllowed) << c->error;
  EXPECT_EQ(c->degraded, "local");
  EXPECT_EQ(c->charged, 150);
  EXPECT_EQ(c->lease_s, 60);
  ASSERT_EQ(c->remaining.size(), 2u);
  EXPECT_EQ(c->remaining[0].gate, "quota");
  EXPECT_EQ(c->remaining[0].value, 50000 - 150);
  EXPECT_EQ(c->remaining[1].gate, "tenant_tokens");
  EXPECT_NEAR(c->remaining[1].value, 350, 0.01);
  // The settle subtracts everything taken (estimate and charges); a charge after it is a 409.
  std::optional<SettleResult> s = f->settle(a.request_id, 120);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->charged, 120);
  EXPECT_EQ(s->remaining, 50000 - 120);
  c = f->charge(a.request_id, 5);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->outcome, Outcome::kConflict);
  EXPECT_EQ(c->error, charge_settled_error(a.request_id));
  // The charge that takes the allowance past its limit: recorded, and 429 quota.
  AdmitResult b = admit_as(*f, "t", 10);
  ASSERT_EQ(b.outcome, Outcome::kAllowed);
  c = f->charge(b.request_id, 60000);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->outcome, Outcome::kRefused);
  EXPECT_EQ(c->reason, "quota");
  EXPECT_GT(c->retry_after_ms, 0);
  EXPECT_EQ(c->charged, 60010);
  // Not a local reservation: Redis's to answer.
  EXPECT_FALSE(f->charge("t.0123456789abcdef", 5));
  std::vector<JournalRecord> batch = drain(*f);
  ASSERT_EQ(batch.size(), 5u);
  EXPECT_EQ(batch[1].op, JournalRecord::Op::kCharge);
  EXPECT_EQ(batch[1].tokens, 50);
  EXPECT_EQ(batch[1].buckets[0].cost, "50");
  EXPECT_EQ(batch[2].tokens, 120 - 150);
  EXPECT_EQ(batch[4].op, JournalRecord::Op::kCharge);
  EXPECT_EQ(batch[4].tokens, 60000);
  // Past its reservation_ttl_s: 404.
  now_ += 601'000;
  c = f->charge(b.request_id, 1);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->outcome, Outcome::kNotFound);
  EXPECT_EQ(c->error, charge_not_found_error(b.request_id));
}

TEST_F(LocalGatesTest, ChargesComeBackAfterARestart) {
  std::string rid;
  {
    auto f = open();
    AdmitResult a = admit_as(*f, "t", 100);
    ASSERT_EQ(a.outcome, Outcome::kAllowed);
    rid = a.request_id;
    ASSERT_EQ(f->charge(rid, 40)->outcome, Outcome::kAllowed);
  }
  auto f = open();
  std::optional<SettleResult> s = f->settle(rid, 100);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->remaining, 50000 - 100);
  std::vector<JournalRecord> batch = drain(*f);
  ASSERT_EQ(batch.size(), 3u);
  EXPECT_EQ(batch[2].tokens, 100 - 140);
  // The token-rate gate came back from the journal: the settle corrects it in Redis.
  ASSERT_EQ(batch[2].buckets.size(), 1u);
  EXPECT_EQ(batch[2].buckets[0].cost, "-40");
  EXPECT_EQ(batch[2].buckets[0].capacity, "1000");
}

TEST_F(LocalGatesTest, ATenantOfTheRegistryIsDecidedOnItsPlan) {
  auto f = open();
  const TenantDirectory registry(1, {{"reg", "vip"}, {"gone", "quiet"}});
  AdmitResult a = admit_as(*f, "reg", 0, "", nullptr, &registry);
  ASSERT_EQ(a.outcome, Outcome::kAllowed) << a.error;
  EXPECT_EQ(a.remaining[0].limit, 4);
  EXPECT_EQ(admit_as(*f, "reg").outcome, Outcome::kBadRequest);  // without the registry
  EXPECT_EQ(failure_mode(snap_->cfg, "gone", &registry), config::OnFailure::kClosed);
  EXPECT_EQ(failure_mode(snap_->cfg, "gone"), config::OnFailure::kLocal);
}

// A journal written before buckets had a cost: each bucket is read as cost 1.
TEST_F(FallbackTest, AnOldJournalLineReadsAsCostOne) {
  std::ofstream(path_)
      << "{\"journal\":\"00000000000000ab\",\"next\":1}\n"
         "{\"seq\":1,\"op\":\"admit\",\"tenant\":\"t\",\"request_id\":\"t.00000000000000aa\","
         "\"tokens\":5,\"at_ms\":1764633600000,\"month\":\"2026-12\",\"month_end\":1798761600,"
         "\"reservation_ttl_ms\":600000,\"lease_ms\":0,\"max_streams\":-1,\"allowance\":250,"
         "\"buckets\":[[\"dg:{t:t}:tb:tenant\",\"8\",\"4\"]],"
         "\"globals\":[[\"model\",\"big\",[\"dg:{g:model:big}:tb\",\"40\",\"4\"]]]}\n"
         "{\"seq\":2,\"op\":\"settle\",\"tenant\":\"t\",\"request_id\":\"t.00000000000000aa\","
         "\"tokens\":-2,\"at_ms\":1764633600000,\"month\":\"2026-12\",\"month_end\":1798761600}\n";
  auto f = open();
  EXPECT_EQ(f->pending(), 2u);
  std::vector<JournalRecord> batch = drain(*f);
  ASSERT_EQ(batch.size(), 2u);
  ASSERT_EQ(batch[0].buckets.size(), 1u);
  EXPECT_EQ(batch[0].buckets[0].cost, "1");
  EXPECT_EQ(batch[0].buckets[0].gate, "");
  // Before plans had several quotas: the month's counter, expiring 32 days after the month.
  EXPECT_EQ(batch[0].quotas, (std::vector<QuotaPeriodRef>{{"2026-12", 1798761600 + 32 * 86400}}));
  EXPECT_EQ(batch[0].globals.at(0).bucket.cost, "1");
  EXPECT_TRUE(batch[1].buckets.empty());
  EXPECT_EQ(batch[1].tokens, -2);
}

// Through a Gateway on a real Redis, stopped for the outage and started again.
class OutageTest : public ::testing::Test {
 protected:
  OutageTest() {
    char tmpl[] = "/tmp/dripgate-outage-test-XXXXXX";
    dir_ = mkdtemp(tmpl);
    journal_ = dir_ + "/journal";
  }
  ~OutageTest() override {
    gateway_.reset();
    fallback_.reset();
    std::filesystem::remove_all(dir_);
  }
  Gateway& gateway() {
    if (!gateway_) {
      std::string yaml = kGates;
      yaml.replace(yaml.find("journal: /unused"), 16, "journal: " + journal_);
      yaml += "control: { dataplane_socket: " + dir_ + "/dp.sock }\n";
      auto loaded = config::load_string(yaml, "t.yaml");
      for (const auto& e : loaded.errors) ADD_FAILURE() << e.str();
      config::Config cfg = *loaded.config;
      cfg.redis.host = "127.0.0.1";
      cfg.redis.port = redis_.port();
      cfg.redis.timeout_ms = 500;
      store_.emplace(cfg);
      std::string why;
      fallback_ = Fallback::open(journal_, &why);
      EXPECT_TRUE(fallback_) << why;
      gateway_.emplace(*store_, loop_.base(), flows_, metrics_, 500, nullptr, "http",
                       fallback_.get());
      // The whole pool: a test that stops Redis must not find some connections still setting up.
      EXPECT_TRUE(loop_.wait_until(
          [&] { return gateway_->redis_connected() == cfg.redis.pool_size; }, 3000ms));
    }
    return *gateway_;
  }
  template <class R, class Req, class Returns>
  R run(Returns (Gateway::*call)(Req, std::function<void(R)>), Req req) {
    auto out = loop_.await<R>([&](auto done) { (gateway().*call)(std::move(req), done); }, 5000ms);
    EXPECT_TRUE(out) << "no answer within 5 s";
    return out.value_or(R{});
  }
  AdmitResult admit(const std::string& tenant, int64_t tokens = 0, const std::string& user = "",
                    const std::string& model = "") {
    AdmitRequest r;
    r.tenant = tenant;
    r.tokens = tokens;
    r.user = user;
    r.model = model;
    return run(&Gateway::admit, std::move(r)).result;
  }
  // Redis back: waits until the journal is in it.
  void back() {
    redis_.start();
    EXPECT_TRUE(loop_.wait_until([&] { return gateway_->redis_up() && fallback_->pending() == 0; },
                                 10'000ms))
        << fallback_->pending() << " pending";
  }
  double level(const std::string& key) { return std::stod(redis_.cli("HGET " + key + " tk")); }

  // Durable: a reservation Redis held before the outage is there after it.
  testing::RedisServer redis_{testing::RedisServer::Durability::kAppendFsyncAlways};
  std::string dir_, journal_;
  testing::EventLoop loop_;
  AdmittedFlows flows_;
  Metrics metrics_;
  std::optional<ConfigStore> store_;
  std::unique_ptr<Fallback> fallback_;
  std::optional<Gateway> gateway_;
};

TEST_F(OutageTest, TokenRateGatesTakeTheEstimateAndSettleCorrectsThemAfterReconcile) {
  gateway();
  redis_.stop();
  AdmitResult a = admit("t", 300, "", "m");
  ASSERT_EQ(a.outcome, Outcome::kAllowed) << a.error;
  EXPECT_EQ(a.degraded, "local");
  // A stream charge, then the settle of the stream's total: everything decided here.
  ChargeResult c = run(&Gateway::charge, ChargeRequest{"t", a.request_id, 50}).result;
  ASSERT_EQ(c.outcome, Outcome::kAllowed) << c.error;
  EXPECT_EQ(c.degraded, "local");
  EXPECT_EQ(c.charged, 350);
  SettleResult s = run(&Gateway::settle, SettleRequest{"t", a.request_id, 100});
  ASSERT_EQ(s.outcome, Outcome::kAllowed) << s.error;
  EXPECT_EQ(s.degraded, "local");
  EXPECT_TRUE(s.settled);
  ChargeResult late = run(&Gateway::charge, ChargeRequest{"t", a.request_id, 1}).result;
  EXPECT_EQ(late.outcome, Outcome::kConflict);
  // A reservation this daemon does not hold is Redis's: no answer without it.
  ChargeResult unknown = run(&Gateway::charge, ChargeRequest{"t", "t.0123456789abcdef", 1}).result;
  EXPECT_EQ(unknown.outcome, Outcome::kUnavailable);
  back();
  // Taken 300, charged 50, given back 250: each bucket 100 below its capacity, the counter 100.
  EXPECT_NEAR(level(keys::bucket("t", "tenant_tokens")), 900, 1);
  EXPECT_NEAR(level(keys::global_bucket("model_tokens", "m")), 1900, 1);
  EXPECT_NEAR(level(keys::bucket("t", "tenant")), 7, 0.01);
  EXPECT_EQ(redis_.cli("GET " + keys::quota("t", keys::current_months().cur.name)), "100");
}

// The global ip gate without Redis is a global gate like the others: a local share of each
// address's bucket across tenants, journaled, and charged to the address's bucket (in its own
// slot) once Redis is back.
TEST_F(OutageTest, TheGlobalIpGateIsDecidedLocallyAndReconciled) {
  gateway();
  redis_.stop();
  auto from = [&](const std::string& tenant, const std::string& ip) {
    AdmitRequest r;
    r.tenant = tenant;
    r.client_ip = ip;
    return run(&Gateway::admit, std::move(r)).result;
  };
  // The local share (0.5) of a capacity of 4: two admissions of one /64, whichever the tenant.
  AdmitResult a = from("t", "2001:db8:7:7::1");
  ASSERT_EQ(a.outcome, Outcome::kAllowed) << a.error;
  EXPECT_EQ(a.degraded, "local");
  ASSERT_EQ(from("v", "2001:db8:7:7::2").outcome, Outcome::kAllowed);
  AdmitResult refused = from("t", "2001:db8:7:7::3");
  ASSERT_EQ(refused.outcome, Outcome::kRefused);
  EXPECT_EQ(refused.gate, "global_ip");
  EXPECT_EQ(refused.degraded, "local");
  EXPECT_EQ(from("v", "2001:db8:7:8::1").outcome, Outcome::kAllowed);  // another /64
  back();
  EXPECT_NEAR(level(keys::global_bucket("global_ip", "2001:db8:7:7::/64")), 2, 0.01);
  EXPECT_NEAR(level(keys::global_bucket("global_ip", "2001:db8:7:8::/64")), 3, 0.01);
}

TEST_F(OutageTest, AShadowGateIsCountedAsShadowRefused) {
  gateway();
  redis_.stop();
  ASSERT_EQ(admit("t", 0, "u").outcome, Outcome::kAllowed);
  AdmitResult b = admit("t", 0, "u");
  ASSERT_EQ(b.outcome, Outcome::kAllowed) << b.error;
  EXPECT_EQ(b.shadow_refused, "user");
  EXPECT_EQ(metrics_.admissions().value({"t", "user", "shadow_refused", "http"}), 1u);
  back();
  // The user bucket gave 1 of its 2 (the second admission took nothing from it).
  EXPECT_NEAR(level(keys::bucket("t", "user", "u")), 1, 0.01);
  EXPECT_NEAR(level(keys::bucket("t", "tenant")), 6, 0.01);
}

TEST_F(OutageTest, ARegistryTenantIsDecidedLocallyUnderTheBrake) {
  gateway();
  store_->publish_registry(std::make_shared<const TenantDirectory>(
      1, TenantDirectory::Plans{{"reg", "vip"}, {"off", "quiet"}}));
  store_->publish_brake(std::make_shared<const Brake>(Brake{0.5, {}, 60}));
  redis_.stop();
  // vip's tenant bucket: 8 × 0.5 × 0.5 = 2 here.
  AdmitResult a = admit("reg");
  ASSERT_EQ(a.outcome, Outcome::kAllowed) << a.error;
  EXPECT_EQ(a.degraded, "local");
  EXPECT_EQ(a.brake, 0.5);
  ASSERT_EQ(admit("reg").outcome, Outcome::kAllowed);
  AdmitResult r = admit("reg");
  EXPECT_EQ(r.outcome, Outcome::kRefused);
  EXPECT_EQ(r.gate, "tenant");
  // The registry's plan fails closed: its own on_failure, not redis.on_failure.
  AdmitResult off = admit("off");
  EXPECT_EQ(off.outcome, Outcome::kUnavailable);
  EXPECT_EQ(off.degraded, "");
  back();
  EXPECT_NEAR(level(keys::bucket("reg", "tenant")), 6, 0.01);
}

TEST_F(OutageTest, AnOldJournalIsReconciledAsCostOne) {
  std::ofstream(journal_)
      << "{\"journal\":\"00000000000000ab\",\"next\":1}\n"
         "{\"seq\":1,\"op\":\"admit\",\"tenant\":\"t\",\"request_id\":\"t.00000000000000aa\","
         "\"tokens\":5,\"at_ms\":1764633600000,\"month\":\"2026-12\",\"month_end\":1798761600,"
         "\"reservation_ttl_ms\":600000,\"lease_ms\":0,\"max_streams\":-1,\"allowance\":250,"
         "\"buckets\":[[\"dg:{t:t}:tb:tenant\",\"8\",\"0.001\"],"
         "[\"dg:{t:t}:tb:tenant_tokens\",\"1000\",\"0.001\"]],\"globals\":[]}\n";
  gateway();
  EXPECT_TRUE(loop_.wait_until([&] { return fallback_->pending() == 0; }, 5000ms));
  EXPECT_NEAR(level(keys::bucket("t", "tenant")), 7, 0.01);
  EXPECT_NEAR(level(keys::bucket("t", "tenant_tokens")), 999, 0.01);
  EXPECT_EQ(redis_.cli("GET " + keys::quota("t", "2026-12")), "5");
}

// A settle Redis missed is sent whole once it is back: the model's token-rate gate is corrected
// too. One whose reservation Redis no longer holds is counted as lost, not as reconciled.
TEST_F(OutageTest, ADeferredSettleCorrectsEveryGateOrIsCountedLost) {
  gateway();
  AdmitResult a = admit("t", 300, "", "m");
  ASSERT_EQ(a.outcome, Outcome::kAllowed) << a.error;
  EXPECT_EQ(a.degraded, "");
  redis_.stop();
  SettleResult s = run(&Gateway::settle, SettleRequest{"t", a.request_id, 100, "", "", "m"});
  ASSERT_EQ(s.outcome, Outcome::kAllowed) << s.error;
  EXPECT_EQ(s.degraded, "local");
  SettleResult unknown = run(&Gateway::settle, SettleRequest{"t", "t.00000000000000ee", 5});
  ASSERT_EQ(unknown.outcome, Outcome::kAllowed) << unknown.error;
  back();
  // 300 taken at the admission, 200 given back by the settle.
  EXPECT_NEAR(level(keys::global_bucket("model_tokens", "m")), 1900, 1);
  EXPECT_NEAR(level(keys::bucket("t", "tenant_tokens")), 900, 1);
  EXPECT_EQ(metrics_.reconciled_records().value({"lost"}), 1u);
  EXPECT_EQ(metrics_.reconciled_records().value({"ok"}), 1u);
}

// A slow Redis (stopped, its connections kept): a failed call is a 503 as itself until
// redis.breaker.failures (3) failed in a row; then requests are decided locally without asking
// Redis, and once it answers again the probes close the breaker.
TEST_F(OutageTest, TheBreakerOpensAfterFailuresInARowAndClosesAfterItsProbes) {
  gateway();
  redis_.pause();
  for (int i = 0; i < 2; ++i) {
    AdmitResult r = admit("t");
    EXPECT_EQ(r.outcome, Outcome::kUnavailable) << i;
    EXPECT_EQ(r.degraded, "") << i;
  }
  AdmitResult third = admit("t");
  EXPECT_EQ(third.outcome, Outcome::kAllowed) << third.error;
  EXPECT_EQ(third.degraded, "local");
  EXPECT_EQ(metrics_.breaker_transitions().value({"open"}), 1u);
  // Open: decided here, Redis not asked (no call failed by its timeout).
  const uint64_t timeouts = metrics_.redis_errors().value({"timeout"});
  AdmitResult unasked = admit("t");
  EXPECT_EQ(unasked.degraded, "local");
  EXPECT_EQ(metrics_.redis_errors().value({"timeout"}), timeouts);
  redis_.resume();
  for (int i = 0; i < 50 && metrics_.breaker_transitions().value({"closed"}) == 0; ++i) {
    admit("t");
    std::this_thread::sleep_for(100ms);
  }
  EXPECT_EQ(metrics_.breaker_transitions().value({"closed"}), 1u);
  EXPECT_GE(metrics_.breaker_transitions().value({"half_open"}), 1u);
  AdmitResult after = admit("t");
  EXPECT_EQ(after.degraded, "");
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
