#include "control/fallback.h"

#include <spdlog/spdlog.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>

#include "control/keys.h"
#include "control/script_calls.h"

namespace dripgate::control {

namespace {

constexpr char kJournalUnwritable[] = "redis: unavailable, and the local journal cannot be written";

int64_t system_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// A reservation without a quota gate still lives this long (settle answers for it).
constexpr int64_t kDefaultReservationTtlMs = 600 * 1000;

LocalAdmit local_of(const JournalRecord& r) {
  LocalAdmit a;
  a.tenant = r.tenant;
  a.request_id = r.request_id;
  a.allowance = r.allowance;
  a.tokens = r.tokens;
  a.max_streams = r.max_streams;
  a.lease_ms = r.lease_ms;
  a.reservation_ttl_ms = r.reservation_ttl_ms;
  a.month = r.month;
  a.month_end = r.month_end;
  return a;
}

}  // namespace

config::OnFailure failure_mode(const config::Config& cfg, const std::string& tenant) {
  auto t = cfg.tenants.find(tenant);
  if (t == cfg.tenants.end()) t = cfg.tenants.find(std::string(config::kAnyTenant));
  if (t != cfg.tenants.end()) {
    auto p = cfg.plans.find(t->second.plan);
    if (p != cfg.plans.end() && p->second.on_failure) return *p->second.on_failure;
  }
  return cfg.redis.on_failure;
}

AdmitResult open_admit(const Snapshot& snap, const AdmitRequest& req, std::mt19937_64& rng) {
  AdmitResult r;
  Prepared p;
  std::string err = prepare(snap.tables, req, rng, p);
  if (!err.empty()) {
    r.outcome = Outcome::kBadRequest;
    r.error = std::move(err);
    return r;
  }
  r.outcome = Outcome::kAllowed;
  r.request_id = p.rid;
  r.cls = p.t->plan->cls;
  r.lease_s = p.t->lease_len_s;
  r.degraded = "open";
  return r;
}

std::unique_ptr<Fallback> Fallback::open(const std::string& path, std::string* error, Clock now) {
  std::unique_ptr<Journal> j = Journal::open(path, error);
  if (!j) return nullptr;
  if (j->unreadable())
    spdlog::warn("journal {}: {} unreadable line(s) skipped (torn by a crash mid-write)", path,
                 j->unreadable());
  if (j->pending_count())
    spdlog::info("journal {}: {} local decision(s) to reconcile into Redis", path,
                 j->pending_count());
  return std::unique_ptr<Fallback>(new Fallback(std::move(j), now ? std::move(now) : system_ms));
}

Fallback::Fallback(std::unique_ptr<Journal> journal, Clock now)
    : journal_(std::move(journal)), now_(std::move(now)) {
  const int64_t t = now_();
  for (const JournalRecord& r : journal_->records()) {
    switch (r.op) {
      case JournalRecord::Op::kAdmit:
        limiter_.restore_admit(local_of(r), r.at_ms, t);
        break;
      case JournalRecord::Op::kSettle:
        limiter_.restore_settle(r.request_id, r.tokens);
        break;
      case JournalRecord::Op::kRelease:
        limiter_.restore_release(r.request_id);
        break;
      default:
        break;
    }
  }
  std::lock_guard lock(mu_);
  counts();
}

void Fallback::counts() {
  open_.store(limiter_.open(), std::memory_order_relaxed);
  pending_.store(journal_->pending_count(), std::memory_order_relaxed);
}

AdmitResult Fallback::admit(const Snapshot& snap, const AdmitRequest& req, std::mt19937_64& rng) {
  AdmitResult res;
  Prepared p;
  std::string err = prepare(snap.tables, req, rng, p);
  if (!err.empty()) {
    res.outcome = Outcome::kBadRequest;
    res.error = std::move(err);
    return res;
  }
  res.request_id = p.rid;
  res.cls = p.t->plan->cls;
  res.lease_s = p.t->lease_len_s;
  res.degraded = "local";
  const config::Plan& plan = *p.t->plan;
  const double share = snap.cfg.redis.local_share;

  LocalAdmit a;
  JournalRecord rec;
  a.tenant = rec.tenant = p.t->name;
  a.request_id = rec.request_id = p.rid;
  a.tokens = rec.tokens = p.tokens;
  for (int i = 0; i < p.nb; ++i) {
    const Gate& g = *p.buckets[i];
    a.buckets.push_back(
        {std::string(p.bucket_keys[i]), g.name, g.capacity * share, g.refill * share});
    rec.buckets.push_back({std::string(p.bucket_keys[i]), g.cap_s, g.rate_s});
  }
  // A sliding window is decided locally as a bucket of capacity limit refilling limit per
  // window (an approximation: it admits up to twice the limit in a window that straddles an
  // empty one), and is not journaled: reconcile.lua charges buckets, and a window's admissions
  // matter only for one window, which an outage mostly outlasts.
  auto window = [&](const Gate& g, std::string_view key) {
    const double limit = static_cast<double>(g.limit);
    a.buckets.push_back({std::string(key), g.name, limit * share,
                         limit * 1000 / static_cast<double>(g.window_ms) * share});
  };
  for (int i = 0; i < p.nw; ++i) window(*p.windows[i], p.window_keys[i]);
  for (int i = 0; i < p.ng; ++i) {
    const Gate& g = *p.globals[i];
    if (g.window) {
      window(g, g.key);
      continue;
    }
    a.buckets.push_back({g.key, g.name, g.capacity * share, g.refill * share});
    rec.globals.push_back({g.name, g.id, {g.key, g.cap_s, g.rate_s}});
  }
  a.reservation_ttl_ms =
      plan.quota ? plan.quota->reservation_ttl_s * 1000 : kDefaultReservationTtlMs;
  if (plan.concurrency) {
    a.max_streams = std::max<int64_t>(
        1, static_cast<int64_t>(
               std::floor(static_cast<double>(plan.concurrency->max_streams) * share)));
    a.lease_ms = plan.concurrency->lease_s * 1000;
  }
  const keys::Month& month = keys::current_months().cur;
  a.month = rec.month = month.name;
  a.month_end = rec.month_end = month.end;
  rec.reservation_ttl_ms = a.reservation_ttl_ms;
  rec.lease_ms = a.lease_ms;
  rec.max_streams = a.max_streams;

  std::lock_guard lock(mu_);
  const int64_t now = now_();
  rec.at_ms = now;
  if (limiter_.is_local(p.rid)) {
    res.outcome = Outcome::kConflict;
    res.error = "request_id: '" + p.rid + "' is already in use";
    return res;
  }
  if (plan.quota) {
    auto k = known_left_.find(p.t->name);
    int64_t left = k != known_left_.end() ? k->second : plan.quota->tokens_per_month;
    a.allowance = rec.allowance =
        static_cast<int64_t>(std::floor(static_cast<double>(left) * share));
  }
  LocalVerdict v = limiter_.admit(a, now);
  res.remaining = std::move(v.remaining);
  if (!v.allowed) {
    res.outcome = Outcome::kRefused;
    res.gate = v.gate;
    res.reason = v.reason;
    res.retry_after_ms = v.retry_after_ms;
    if (v.reason == "quota") {
      for (const Remaining& q : res.remaining)
        if (q.gate == "quota")
          res.tokens_missing = std::max<int64_t>(0, p.tokens - static_cast<int64_t>(q.value));
      if (plan.degrade) {
        res.degrade_model = plan.degrade->model;
        res.upgrade_url = plan.degrade->upgrade_url;
      }
    }
    return res;
  }
  // The limiter has taken the request's share: should the journal fail, the client is told
  // 503 and charged nothing in Redis, while this daemon stays charged (the safe side).
  if (!journal_->append(rec)) {
    spdlog::error("journal: cannot write a local admission ({}); answered 503",
                  std::strerror(errno));
    res = AdmitResult{};
    res.outcome = Outcome::kUnavailable;
    res.error = kJournalUnwritable;
    return res;
  }
  counts();
  res.outcome = Outcome::kAllowed;
  return res;
}

std::optional<SettleResult> Fallback::settle(const std::string& request_id, int64_t tokens) {
  std::lock_guard lock(mu_);
  std::optional<LocalSettle> s = limiter_.settle(request_id, tokens, now_());
  if (!s) return std::nullopt;
  SettleResult res;
  res.degraded = "local";
  if (s->first) {
    JournalRecord rec;
    rec.op = JournalRecord::Op::kSettle;
    rec.tenant = s->reservation.tenant;
    rec.request_id = request_id;
    rec.tokens = s->delta;
    rec.at_ms = now_();
    rec.month = s->reservation.month;
    rec.month_end = s->reservation.month_end;
    if (!journal_->append(rec)) {
      spdlog::error("journal: cannot write a local settle ({})", std::strerror(errno));
      res.outcome = Outcome::kUnavailable;
      res.error = "journal: cannot be written";
      return res;
    }
  }
  counts();
  res.outcome = Outcome::kAllowed;
  res.settled = s->first;
  res.charged = s->charged;
  res.remaining = s->remaining;
  res.detail = s->first ? "settled" : "already_settled";
  return res;
}

std::optional<ReleaseResult> Fallback::release(const std::string& request_id) {
  std::lock_guard lock(mu_);
  const int64_t now = now_();
  std::optional<bool> live = limiter_.release(request_id, now);
  if (!live) return std::nullopt;
  JournalRecord rec;
  rec.op = JournalRecord::Op::kRelease;
  rec.request_id = request_id;
  rec.at_ms = now;
  // Only a restart needs it (Redis holds no local lease): a failed write costs the lease's
  // return after a restart, nothing more.
  if (!journal_->append(rec)) spdlog::warn("journal: cannot write a local release");
  counts();
  ReleaseResult res;
  res.outcome = Outcome::kAllowed;
  res.released = *live;
  res.degraded = "local";
  return res;
}

bool Fallback::journal_deferred(JournalRecord& rec) {
  std::lock_guard lock(mu_);
  rec.at_ms = now_();
  if (!journal_->append(rec)) return false;
  counts();
  return true;
}

SettleResult Fallback::defer_settle(const std::string& tenant, const std::string& request_id,
                                    int64_t tokens) {
  JournalRecord rec;
  rec.op = JournalRecord::Op::kResettle;
  rec.tenant = tenant;
  rec.request_id = request_id;
  rec.tokens = tokens;
  SettleResult res;
  res.degraded = "local";
  if (!journal_deferred(rec)) {
    res.outcome = Outcome::kUnavailable;
    res.error = kJournalUnwritable;
    return res;
  }
  // Settled as far as the client is concerned: Redis applies it when it is back.
  res.outcome = Outcome::kAllowed;
  res.settled = true;
  res.charged = tokens;
  res.detail = "settled";
  return res;
}

ReleaseResult Fallback::defer_release(const std::string& tenant, const std::string& request_id) {
  JournalRecord rec;
  rec.op = JournalRecord::Op::kRerelease;
  rec.tenant = tenant;
  rec.request_id = request_id;
  ReleaseResult res;
  res.degraded = "local";
  if (!journal_deferred(rec)) {
    res.outcome = Outcome::kUnavailable;
    res.error = kJournalUnwritable;
    return res;
  }
  // Whether a lease was held is Redis's to say; it ends it when it is back.
  res.outcome = Outcome::kAllowed;
  res.released = false;
  return res;
}

void Fallback::quota_left(const std::string& tenant, int64_t left) {
  std::lock_guard lock(mu_);
  known_left_[tenant] = left;
  limiter_.forget_quota(tenant);
}

std::vector<JournalRecord> Fallback::claim(size_t max) {
  std::lock_guard lock(mu_);
  std::vector<JournalRecord> out;
  if (claimed_) return out;
  limiter_.sweep(now_());
  for (const JournalRecord* r : journal_->pending()) {
    if (out.size() == max) break;
    out.push_back(*r);
  }
  if (out.empty()) {
    if (limiter_.open() == 0) journal_->compact();
    counts();
    return out;
  }
  claimed_ = true;
  return out;
}

void Fallback::reconciled(uint64_t seq) {
  std::lock_guard lock(mu_);
  journal_->applied(seq);
  counts();
}

void Fallback::end_batch() {
  std::lock_guard lock(mu_);
  claimed_ = false;
  counts();
}

}  // namespace dripgate::control
