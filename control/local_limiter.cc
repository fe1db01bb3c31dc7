#include "control/local_limiter.h"

#include <algorithm>
#include <cmath>

namespace dripgate::control {

namespace {

constexpr int64_t kNeverMs = 86400000;  // a bucket that never refills: a day, as admit.lua says

Remaining bucket_remaining(const LocalBucket& b, double tokens) {
  return control::bucket_remaining(b.gate, b.capacity, b.refill, tokens);
}

}  // namespace

double LocalLimiter::level(const LocalBucket& b, int64_t now_ms) {
  auto it = buckets_.find(b.key);
  if (it == buckets_.end()) return b.capacity;
  double elapsed = std::max<int64_t>(0, now_ms - it->second.at_ms) / 1000.0;
  return std::min(b.capacity, it->second.tokens + elapsed * b.refill);
}

size_t LocalLimiter::live_leases(const std::string& tenant, int64_t now_ms) {
  size_t n = 0;
  for (const auto& [rid, l] : leases_)
    if (l.tenant == tenant && l.until_ms > now_ms) ++n;
  return n;
}

LocalVerdict LocalLimiter::admit(const LocalAdmit& a, int64_t now_ms) {
  LocalVerdict v;
  int64_t wait = -1;
  auto refuse = [&](const std::string& gate, const char* reason, int64_t ms) {
    if (ms > wait) {
      wait = ms;
      v.gate = gate;
      v.reason = reason;
    }
  };
  for (const LocalBucket& b : a.buckets) {
    double lv = level(b, now_ms);
    v.remaining.push_back(bucket_remaining(b, lv));
    if (lv < 1)
      refuse(b.gate, "rate",
             b.refill > 0 ? static_cast<int64_t>(std::ceil((1 - lv) / b.refill * 1000)) : kNeverMs);
  }
  Allowance* q = nullptr;
  if (a.allowance) {
    q = &quota_.try_emplace(a.tenant, Allowance{std::max<int64_t>(0, *a.allowance), 0})
             .first->second;
    Remaining r;
    r.gate = "quota";
    r.limit = static_cast<double>(q->limit);
    r.value = static_cast<double>(std::max<int64_t>(0, q->limit - q->spent));
    r.reset_s = std::max<int64_t>(0, a.month_end - now_ms / 1000);
    v.remaining.push_back(r);
    if (q->spent + a.tokens > q->limit) refuse("quota", "quota", r.reset_s * 1000);
  }
  if (a.max_streams >= 0) {
    size_t live = live_leases(a.tenant, now_ms);
    if (static_cast<int64_t>(live) >= a.max_streams) {
      int64_t first = kNeverMs;
      for (const auto& [rid, l] : leases_)
        if (l.tenant == a.tenant && l.until_ms > now_ms)
          first = std::min(first, l.until_ms - now_ms);
      refuse("concurrency", "concurrency", first);
    }
  }
  if (wait >= 0) {
    v.retry_after_ms = wait;
    return v;
  }
  take(a, now_ms);
  v.allowed = true;
  for (size_t i = 0; i < a.buckets.size(); ++i) v.remaining[i].value -= 1;
  if (q)
    for (Remaining& r : v.remaining)
      if (r.gate == "quota")
        r.value = static_cast<double>(std::max<int64_t>(0, q->limit - q->spent));
  return v;
}

void LocalLimiter::take(const LocalAdmit& a, int64_t now_ms) {
  for (const LocalBucket& b : a.buckets) buckets_[b.key] = Level{level(b, now_ms) - 1, now_ms};
  if (a.allowance)
    quota_.try_emplace(a.tenant, Allowance{*a.allowance, 0}).first->second.spent += a.tokens;
  reservations_[a.request_id] = LocalReservation{
      a.tenant, a.tokens, std::nullopt, now_ms + a.reservation_ttl_ms, a.month, a.month_end};
  if (a.max_streams >= 0) leases_[a.request_id] = Lease{a.tenant, now_ms + a.lease_ms};
}

std::optional<LocalSettle> LocalLimiter::settle(const std::string& request_id, int64_t tokens,
                                                int64_t now_ms) {
  auto it = reservations_.find(request_id);
  if (it == reservations_.end()) return std::nullopt;
  LocalReservation& r = it->second;
  LocalSettle s;
  // Past its time a reservation is no longer open: its estimate stays charged, as in Redis.
  if (!r.settled && r.expires_ms > now_ms) {
    s.first = true;
    s.delta = tokens - r.estimate;
    r.settled = tokens;
    auto q = quota_.find(r.tenant);
    if (q != quota_.end()) q->second.spent += s.delta;
  }
  s.charged = r.settled.value_or(r.estimate);
  auto q = quota_.find(r.tenant);
  if (q != quota_.end()) s.remaining = std::max<int64_t>(0, q->second.limit - q->second.spent);
  s.reservation = r;
  return s;
}

std::optional<bool> LocalLimiter::release(const std::string& request_id, int64_t now_ms) {
  auto it = leases_.find(request_id);
  if (it == leases_.end()) return std::nullopt;
  bool live = it->second.until_ms > now_ms;
  leases_.erase(it);
  return live;
}

void LocalLimiter::sweep(int64_t now_ms) {
  std::erase_if(reservations_, [&](const auto& kv) { return kv.second.expires_ms <= now_ms; });
  std::erase_if(leases_, [&](const auto& kv) { return kv.second.until_ms <= now_ms; });
}

void LocalLimiter::restore_admit(const LocalAdmit& a, int64_t at_ms, int64_t now_ms) {
  if (a.allowance)
    quota_.try_emplace(a.tenant, Allowance{*a.allowance, 0}).first->second.spent += a.tokens;
  if (at_ms + a.reservation_ttl_ms > now_ms)
    reservations_[a.request_id] = LocalReservation{
        a.tenant, a.tokens, std::nullopt, at_ms + a.reservation_ttl_ms, a.month, a.month_end};
  if (a.max_streams >= 0 && at_ms + a.lease_ms > now_ms)
    leases_[a.request_id] = Lease{a.tenant, at_ms + a.lease_ms};
}

void LocalLimiter::restore_settle(const std::string& request_id, int64_t delta) {
  auto it = reservations_.find(request_id);
  if (it == reservations_.end() || it->second.settled) return;
  it->second.settled = it->second.estimate + delta;
  auto q = quota_.find(it->second.tenant);
  if (q != quota_.end()) q->second.spent += delta;
}

void LocalLimiter::restore_release(const std::string& request_id) {
  leases_.erase(request_id);
}

}  // namespace dripgate::control
