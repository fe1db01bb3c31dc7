#include "control/outage/fallback.h"

#include <spdlog/spdlog.h>

#include <malloc.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <unordered_set>

#include "control/admission/keys.h"
#include "control/admission/script_calls.h"
#include "control/redis/wall_clock.h"

namespace dripgate::control {

namespace {

constexpr char kJournalUnwritable[] = "redis: unavailable, and the local journal cannot be written";

// A reservation without a quota gate still lives this long (settle answers for it).
constexpr int64_t kDefaultReservationTtlMs = 600 * 1000;

// A journaled bucket as the local limiter takes it back after a restart: its local limits are
// not known (the configuration and brake of the decision), so its level is not corrected here.
LocalBucket local_bucket(const JournalRecord::Bucket& b, bool global, const std::string& id) {
  LocalBucket l;
  l.key = b.key;
  l.gate = b.gate;
  l.capacity = -1;
  l.cost = std::strtod(b.cost.c_str(), nullptr);
  l.per_token = b.gate.ends_with("_tokens");
  l.global = global;
  l.id = id;
  l.full_capacity = b.capacity;
  l.full_refill = b.refill;
  return l;
}

LocalAdmit local_of(const JournalRecord& r) {
  LocalAdmit a;
  a.tenant = r.tenant;
  a.request_id = r.request_id;
  a.seq = r.seq;
  a.allowance = r.allowance;
  a.tokens = r.tokens;
  a.max_streams = r.max_streams;
  a.lease_ms = r.lease_ms;
  a.reservation_ttl_ms = r.reservation_ttl_ms;
  a.month = r.month;
  a.month_end = r.month_end;
  a.quotas = r.quotas;
  for (const JournalRecord::Bucket& b : r.buckets) a.buckets.push_back(local_bucket(b, false, {}));
  for (const JournalRecord::Global& g : r.globals)
    a.buckets.push_back(local_bucket(g.bucket, true, g.name));
  return a;
}

// rec's buckets (the tenant's) and globals from local buckets, each with the plan's limits and
// cost(i): what bucket i took, or the correction it gets.
template <class Cost>
void journal_buckets(JournalRecord& rec, const std::vector<LocalBucket>& buckets, Cost cost) {
  for (size_t i = 0; i < buckets.size(); ++i) {
    const LocalBucket& b = buckets[i];
    if (b.window) continue;  // decided locally only (Fallback::admit)
    JournalRecord::Bucket j;
    j.key = b.key;
    j.capacity = b.full_capacity;
    j.refill = b.full_refill;
    j.cost = std::to_string(static_cast<int64_t>(cost(i)));
    j.gate = b.gate;
    if (b.global)
      rec.globals.push_back({b.gate, b.id, std::move(j)});
    else
      rec.buckets.push_back(std::move(j));
  }
}

}  // namespace

config::OnFailure failure_mode(const config::Config& cfg, const std::string& tenant,
                               const TenantDirectory* registry) {
  const config::Plan* plan = plan_of(cfg, tenant, registry);
  return plan && plan->on_failure ? *plan->on_failure : cfg.redis.on_failure;
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

FallbackOptions fallback_options(const config::Redis& redis) {
  FallbackOptions o;
  switch (redis.journal_fsync) {
    case config::Redis::JournalSync::kAlways:
      o.journal.sync = JournalOptions::Sync::kAlways;
      break;
    case config::Redis::JournalSync::kNever:
      o.journal.sync = JournalOptions::Sync::kNever;
      break;
    case config::Redis::JournalSync::kInterval:
      o.journal.sync = JournalOptions::Sync::kInterval;
      o.journal.interval_ms = redis.journal_fsync_ms;
      break;
  }
  o.max_bytes = static_cast<size_t>(redis.journal_max_mb) << 20;
  o.full_mode = redis.journal_full;
  return o;
}

std::unique_ptr<Fallback> Fallback::open(const std::string& path, std::string* error, Clock now,
                                         FallbackOptions options) {
  std::vector<JournalRecord> records;
  std::unique_ptr<Journal> j = Journal::open(path, options.journal, error, &records);
  if (!j) return nullptr;
  if (j->unreadable())
    spdlog::warn("journal {}: {} unreadable line(s) skipped (torn by a crash mid-write)", path,
                 j->unreadable());
  if (j->pending_count())
    spdlog::info("journal {}: {} local decision(s) to reconcile into Redis", path,
                 j->pending_count());
  return std::unique_ptr<Fallback>(new Fallback(
      std::move(j), std::move(records), now ? std::move(now) : wall_ms, std::move(options)));
}

Fallback::Fallback(std::unique_ptr<Journal> journal, std::vector<JournalRecord> records, Clock now,
                   FallbackOptions options)
    : journal_(std::move(journal)), now_(std::move(now)), options_(std::move(options)) {
  const int64_t t = now_();
  for (const JournalRecord& r : records) {
    switch (r.op) {
      case JournalRecord::Op::kAdmit:
        limiter_.restore_admit(local_of(r), r.at_ms, t);
        break;
      case JournalRecord::Op::kSettle:
        limiter_.restore_settle(r.request_id, r.tokens);
        break;
      case JournalRecord::Op::kCharge:
        limiter_.restore_charge(r.request_id, r.tokens);
        break;
      case JournalRecord::Op::kRelease:
        limiter_.restore_release(r.request_id);
        break;
      case JournalRecord::Op::kResettle:  // Redis's reservations: nothing local to restore
      case JournalRecord::Op::kRerelease:
        break;
    }
  }
  std::lock_guard lock(mu_);
  counts();
}

void Fallback::counts() {
  local_.store(limiter_.open() + limiter_.settled(), std::memory_order_relaxed);
  pending_.store(journal_->pending_count(), std::memory_order_relaxed);
  pending_bytes_.store(journal_->pending_bytes() + limiter_.bytes(), std::memory_order_relaxed);
}

bool Fallback::full() {
  const bool full =
      options_.max_bytes > 0 && journal_->pending_bytes() + limiter_.bytes() >= options_.max_bytes;
  if (full != full_) {
    full_ = full;
    if (full)
      spdlog::error(
          "journal: the local decisions not yet in Redis and the local reservations open take "
          "redis.journal_max_mb ({} MiB); new local admissions are decided as journal_full: {} "
          "until Redis takes some or reservations end",
          options_.max_bytes >> 20, config::on_failure_name(options_.full_mode));
    else
      spdlog::warn("journal: below redis.journal_max_mb again; local admissions resume");
  }
  return full;
}

size_t Fallback::segments() const {
  std::lock_guard lock(mu_);
  return journal_->segments();
}

uint64_t Fallback::disk_bytes() const {
  std::lock_guard lock(mu_);
  return journal_->disk_bytes();
}

void Fallback::tick() {
  std::lock_guard lock(mu_);
  journal_->sync_due(now_());
}

namespace {

// A gate's local bucket: the plan's limits scaled to this daemon's share, and by the brake
// factor unless the gate is a shadow one (as prepare's brake: a shadow gate shows what the
// plan's limit would do).
LocalBucket gate_bucket(const Gate& g, std::string_view key, bool global, double share,
                        double factor, int64_t tokens) {
  LocalBucket b;
  b.key = key;
  b.gate = g.name;
  b.shadow = g.shadow == "1";
  const double scale = b.shadow ? share : share * factor;
  if (g.window) {
    // A sliding window is decided locally as a bucket of capacity limit refilling limit per
    // window (an approximation: it admits up to twice the limit in a window that straddles
    // an empty one), and is not journaled: reconcile.lua charges buckets, and a window's
    // admissions matter only for one window, which an outage mostly outlasts.
    const double limit = static_cast<double>(g.limit);
    b.capacity = limit * scale;
    b.refill = limit * 1000 / static_cast<double>(g.window_ms) * scale;
    b.window = true;
  } else {
    b.capacity = g.capacity * scale;
    b.refill = g.refill * scale;
  }
  b.cost = g.per_token ? static_cast<double>(tokens) : 1;
  b.per_token = g.per_token;
  b.global = global;
  b.id = g.id;
  b.full_capacity = g.cap_s;
  b.full_refill = g.rate_s;
  return b;
}

// A local refusal's answer: the gate, the reason and when to retry; for the quota, how many
// tokens are missing and the plan's degrade offer.
void refuse(AdmitResult& res, const LocalVerdict& v, int64_t tokens, const config::Plan& plan) {
  res.outcome = Outcome::kRefused;
  res.gate = v.gate;
  res.reason = v.reason;
  res.retry_after_ms = v.retry_after_ms;
  if (v.reason != "quota") return;
  for (const Remaining& q : res.remaining)
    if (q.gate == "quota")
      res.tokens_missing = std::max<int64_t>(0, tokens - static_cast<int64_t>(q.value));
  if (plan.degrade) {
    res.degrade_model = plan.degrade->model;
    res.upgrade_url = plan.degrade->upgrade_url;
  }
}

}  // namespace

AdmitResult Fallback::admit(const Snapshot& snap, const AdmitRequest& req, std::mt19937_64& rng,
                            const TenantDirectory* registry, const Brake* brake) {
  AdmitResult res;
  Prepared p;
  // Without the brake: it scales the local shares below, while the journal keeps the plan's
  // limits (reconciliation charges what was admitted to the full buckets).
  std::string err = prepare(snap.tables, req, rng, p, registry);
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
  const double factor = brake && brake->applies_to(plan.name) ? brake->factor : 1;

  LocalAdmit a;
  JournalRecord rec;
  a.tenant = rec.tenant = p.t->name;
  a.request_id = rec.request_id = p.rid;
  a.tokens = rec.tokens = p.tokens;
  a.buckets.reserve(static_cast<size_t>(p.nb + p.nw + p.ng));
  auto add = [&](const Gate& g, std::string_view key, bool global) {
    LocalBucket& b = a.buckets.emplace_back(gate_bucket(g, key, global, share, factor, p.tokens));
    if (!b.shadow && factor < 1) res.brake = factor;
  };
  for (int i = 0; i < p.nb; ++i) add(*p.buckets[i], p.bucket_keys[i], false);
  for (int i = 0; i < p.nw; ++i) add(*p.windows[i], p.window_keys[i], false);
  for (int i = 0; i < p.ng; ++i) add(*p.globals[i], p.globals[i]->key, true);
  a.quota_shadow = p.t->quota_shadow_s == "1";
  a.streams_shadow = p.t->streams_shadow_s == "1";
  a.reservation_ttl_ms =
      plan.quota ? plan.quota->reservation_ttl_s * 1000 : kDefaultReservationTtlMs;
  if (plan.concurrency) {
    a.max_streams = std::max<int64_t>(
        1, static_cast<int64_t>(
               std::floor(static_cast<double>(plan.concurrency->max_streams) * share)));
    a.lease_ms = plan.concurrency->lease_s * 1000;
  }
  // The plan's quota month (its quota_timezone), as the scripts would count it, and each quota's
  // period.
  const int64_t now_s = wall_ms() / 1000;
  const keys::Month& month =
      (p.t->zone ? keys::current_months(*p.t->zone, now_s) : keys::current_months()).cur;
  a.month = rec.month = month.name;
  a.month_end = rec.month_end = month.end;
  a.quotas = rec.quotas = p.t->quota_periods(now_s);
  rec.reservation_ttl_ms = a.reservation_ttl_ms;
  rec.lease_ms = a.lease_ms;
  rec.max_streams = a.max_streams;

  std::lock_guard lock(mu_);
  if (full()) {
    if (options_.full_mode == config::OnFailure::kOpen) return open_admit(snap, req, rng);
    res = AdmitResult{};
    res.outcome = Outcome::kUnavailable;
    res.error = "redis: unavailable, and the local decisions hold redis.journal_max_mb";
    return res;
  }
  const int64_t now = now_();
  rec.at_ms = now;
  a.seq = journal_->next_seq();
  if (limiter_.is_local(p.rid)) {
    res.outcome = Outcome::kConflict;
    res.error = "request_id: '" + p.rid + "' is already in use";
    return res;
  }
  if (plan.quota) {
    auto k = known_left_.find(p.t->name);
    // The local allowance follows the monthly quota, else the plan's longest one (the quotas
    // are listed shortest period first).
    int64_t left = k != known_left_.end()
                       ? k->second
                       : plan.quota->tokens_per_month().value_or(plan.quota->limits.back().tokens);
    a.allowance = rec.allowance =
        static_cast<int64_t>(std::floor(static_cast<double>(left) * share));
  }
  LocalVerdict v = limiter_.admit(a, now);
  res.remaining = std::move(v.remaining);
  if (!v.allowed) {
    refuse(res, v, p.tokens, plan);
    return res;
  }
  journal_buckets(rec, a.buckets, [&](size_t i) { return v.taken[i]; });
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
  res.shadow_refused = std::move(v.shadow_refused);
  res.shadow_retry_ms = v.shadow_retry_ms;
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
    rec.quotas = s->reservation.quotas;
    journal_buckets(rec, s->reservation.token_gates, [&](size_t) { return s->delta; });
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

std::optional<ChargeResult> Fallback::charge(const std::string& request_id, int64_t tokens) {
  std::lock_guard lock(mu_);
  const int64_t now = now_();
  std::optional<LocalCharge> c = limiter_.charge(request_id, tokens, now);
  if (!c) return std::nullopt;
  ChargeResult res;
  res.degraded = "local";
  if (c->code == LocalCharge::Code::kSettled) {
    res.outcome = Outcome::kConflict;
    res.error = charge_settled_error(request_id);
    return res;
  }
  if (c->code == LocalCharge::Code::kExpired) {
    res.outcome = Outcome::kNotFound;
    res.error = charge_not_found_error(request_id);
    return res;
  }
  JournalRecord rec;
  rec.op = JournalRecord::Op::kCharge;
  rec.tenant = c->reservation.tenant;
  rec.request_id = request_id;
  rec.tokens = tokens;
  rec.at_ms = now;
  rec.month = c->reservation.month;
  rec.month_end = c->reservation.month_end;
  rec.quotas = c->reservation.quotas;
  journal_buckets(rec, c->reservation.token_gates, [&](size_t) { return tokens; });
  // As for a settle: the tokens were used, and only a record can bring them to Redis.
  if (!journal_->append(rec)) {
    spdlog::error("journal: cannot write a local charge ({})", std::strerror(errno));
    res.outcome = Outcome::kUnavailable;
    res.error = kJournalUnwritable;
    return res;
  }
  counts();
  res.outcome = Outcome::kAllowed;
  res.charged = c->charged;
  res.lease_s = c->lease_left_ms > 0 ? c->lease_left_ms / 1000 : 0;
  res.remaining = std::move(c->remaining);
  // Recorded all the same (the tokens were used); the proxy is told to cut the stream.
  if (c->over_quota) {
    res.outcome = Outcome::kRefused;
    res.gate = res.reason = "quota";
    res.retry_after_ms = c->quota_reset_ms;
  }
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

SettleResult Fallback::defer_settle(const SettleRequest& req) {
  JournalRecord rec;
  rec.op = JournalRecord::Op::kResettle;
  rec.tenant = req.tenant;
  rec.request_id = req.request_id;
  rec.tokens = req.tokens;
  rec.user = req.user;
  rec.api_key = req.api_key;
  rec.model = req.model;
  auto res = deferred<SettleResult>(rec);
  if (res.outcome != Outcome::kAllowed) return res;
  // Settled as far as the client is concerned: Redis applies it when it is back.
  res.settled = true;
  res.charged = req.tokens;
  res.detail = "settled";
  return res;
}

ReleaseResult Fallback::defer_release(const std::string& tenant, const std::string& request_id) {
  JournalRecord rec;
  rec.op = JournalRecord::Op::kRerelease;
  rec.tenant = tenant;
  rec.request_id = request_id;
  // Whether a lease was held is Redis's to say; it ends it when it is back.
  auto res = deferred<ReleaseResult>(rec);
  res.released = false;
  return res;
}

template <class Result>
Result Fallback::deferred(JournalRecord& rec) {
  Result res;
  res.degraded = "local";
  if (journal_deferred(rec)) {
    res.outcome = Outcome::kAllowed;
  } else {
    res.outcome = Outcome::kUnavailable;
    res.error = kJournalUnwritable;
  }
  return res;
}

void Fallback::quota_left(const std::string& tenant, int64_t left) {
  std::lock_guard lock(mu_);
  known_left_[tenant] = left;
  limiter_.forget_quota(tenant);
}

std::vector<JournalRecord> Fallback::claim(size_t max, uint64_t* watermark) {
  std::lock_guard lock(mu_);
  std::vector<JournalRecord> out;
  if (claimed_) return out;
  limiter_.sweep(now_());
  journal_->trim(limiter_.oldest_unsettled());
  if (watermark) *watermark = journal_->watermark();
  // A batch's records go out together, so a correction (a settle's or a stream charge's bucket
  // deltas stop at the capacity, an admission's at empty: their order matters) waits for the
  // next batch when a record of its request is in this one; the later records of that request
  // wait with it. The walk stops after max held ones too: a long run of one request's records
  // must not make every claim walk the whole journal.
  std::unordered_set<std::string> in_batch, held;
  std::vector<uint64_t> unreadable;
  size_t skipped = 0;
  for (const auto& [seq, loc] : journal_->pending()) {
    if (out.size() == max || skipped == max) break;
    std::optional<JournalRecord> r = journal_->read(loc);
    if (!r || r->seq != seq) {
      unreadable.push_back(seq);
      continue;
    }
    if (held.count(r->request_id) || (r->exact() && in_batch.count(r->request_id))) {
      held.insert(r->request_id);
      ++skipped;
      continue;
    }
    in_batch.insert(r->request_id);
    out.push_back(std::move(*r));
  }
  // A record whose line is no longer what was written (the file changed under the daemon)
  // cannot be sent; it leaves, said once per claim.
  if (!unreadable.empty()) {
    spdlog::error(
        "journal: {} record(s) could not be read back from {} and are dropped (first: "
        "{})",
        unreadable.size(), journal_->id(), unreadable.front());
    for (uint64_t seq : unreadable) journal_->applied(seq);
  }
  if (out.empty()) {
    // The drain is over, or the last local reservation expired: what they held goes back to
    // the system, not only to this process's allocator.
    const bool none_local = limiter_.open() + limiter_.settled() == 0;
    if (journal_->pending_count() == 0 && (!drained_ || (none_local && !none_local_))) {
      drained_ = true;
      ::malloc_trim(0);
    }
    none_local_ = none_local;
    counts();
    return out;
  }
  drained_ = false;
  claimed_ = true;
  return out;
}

void Fallback::reconciled(std::span<const uint64_t> seqs) {
  std::lock_guard lock(mu_);
  journal_->applied(seqs);
  counts();
}

void Fallback::end_batch() {
  std::lock_guard lock(mu_);
  claimed_ = false;
  counts();
}

}  // namespace dripgate::control
