#include "control/outage/local_limiter.h"

#include <algorithm>
#include <cmath>

namespace dripgate::control {

namespace {

constexpr int64_t kNeverMs = 86400000;  // a bucket that never refills: a day, as admit.lua says

Remaining bucket_remaining(const LocalBucket& b, double tokens) {
  return control::bucket_remaining(b.gate, b.capacity, b.refill, tokens);
}

// How long until bucket b at level lv holds its cost. A cost above the local capacity never
// fits here: the wait until the bucket is full (at least a second), when Redis may be back.
int64_t wait_ms(const LocalBucket& b, double lv) {
  if (b.refill <= 0) return kNeverMs;
  if (b.cost > b.capacity)
    return std::max<int64_t>(1000,
                             static_cast<int64_t>(std::ceil((b.capacity - lv) / b.refill * 1000)));
  return static_cast<int64_t>(std::ceil((b.cost - lv) / b.refill * 1000));
}

}  // namespace

double LocalLimiter::level(const LocalBucket& b, int64_t now_ms) {
  auto it = buckets_.find(b.key);
  if (it == buckets_.end()) return b.capacity;
  double elapsed = std::max<int64_t>(0, now_ms - it->second.at_ms) / 1000.0;
  return std::min(b.capacity, it->second.tokens + elapsed * b.refill);
}

double LocalLimiter::correct(const LocalBucket& b, double delta, int64_t now_ms) {
  double to = std::min(b.capacity, level(b, now_ms) - delta);
  buckets_[b.key] = Level{to, now_ms};
  return to;
}

size_t LocalLimiter::live_leases(const std::string& tenant, int64_t now_ms, int64_t max) {
  // The tenant's leases, expired ones not yet swept included, are below the limit: no need to
  // tell them apart (the walk of every lease is for a tenant at its limit only).
  auto h = held_.find(tenant);
  const size_t held = h == held_.end() ? 0 : h->second;
  if (static_cast<int64_t>(held) < max) return held;
  size_t n = 0;
  for (const auto& [rid, l] : leases_)
    if (l.tenant == tenant && l.until_ms > now_ms) ++n;
  return n;
}

LocalVerdict LocalLimiter::admit(const LocalAdmit& a, int64_t now_ms) {
  LocalVerdict v;
  int64_t wait = -1;
  // A gate that would refuse: an enforced one refuses (the longest wait names it), a shadow one
  // is reported (the longest wait too) and the request goes on.
  auto refuse = [&](bool shadow, const std::string& gate, const char* reason, int64_t ms) {
    if (shadow) {
      if (v.shadow_refused.empty() || ms > v.shadow_retry_ms) {
        v.shadow_refused = gate;
        v.shadow_retry_ms = ms;
      }
    } else if (ms > wait) {
      wait = ms;
      v.gate = gate;
      v.reason = reason;
    }
  };
  v.taken.reserve(a.buckets.size());
  for (const LocalBucket& b : a.buckets) {
    double lv = level(b, now_ms);
    v.remaining.push_back(bucket_remaining(b, lv));
    const bool short_of = lv < b.cost;
    if (short_of) refuse(b.shadow, b.gate, "rate", wait_ms(b, lv));
    v.taken.push_back(short_of ? 0 : b.cost);
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
    if (q->spent + a.tokens > q->limit) refuse(a.quota_shadow, "quota", "quota", r.reset_s * 1000);
  }
  if (a.max_streams >= 0) {
    size_t live = live_leases(a.tenant, now_ms, a.max_streams);
    if (static_cast<int64_t>(live) >= a.max_streams) {
      int64_t first = kNeverMs;
      for (const auto& [rid, l] : leases_)
        if (l.tenant == a.tenant && l.until_ms > now_ms)
          first = std::min(first, l.until_ms - now_ms);
      refuse(a.streams_shadow, "concurrency", "concurrency", first);
    }
  }
  if (wait >= 0) {
    // Refused: only the refusing gate is reported, as by the scripts.
    v.retry_after_ms = wait;
    v.shadow_refused.clear();
    v.shadow_retry_ms = 0;
    v.taken.clear();
    return v;
  }
  take(a, v.taken, now_ms);
  v.allowed = true;
  for (size_t i = 0; i < a.buckets.size(); ++i) v.remaining[i].value -= v.taken[i];
  if (q)
    for (Remaining& r : v.remaining)
      if (r.gate == "quota")
        r.value = static_cast<double>(std::max<int64_t>(0, q->limit - q->spent));
  return v;
}

void LocalLimiter::take(const LocalAdmit& a, const std::vector<double>& taken, int64_t now_ms) {
  for (size_t i = 0; i < a.buckets.size(); ++i)
    if (taken[i] != 0) correct(a.buckets[i], taken[i], now_ms);
  if (a.allowance)
    quota_.try_emplace(a.tenant, Allowance{*a.allowance, 0}).first->second.spent += a.tokens;
  reserve(a, &taken, now_ms);
  if (a.max_streams >= 0) put_lease(a.request_id, Lease{a.tenant, now_ms + a.lease_ms, a.lease_ms});
}

void LocalLimiter::reserve(const LocalAdmit& a, const std::vector<double>* taken, int64_t at_ms) {
  LocalReservation& r = reservations_[a.request_id];
  if (r.seq) unsettled_.erase(r.seq);
  r = LocalReservation{a.tenant, a.tokens, at_ms + a.reservation_ttl_ms, a.month, a.month_end, {},
                       a.seq,    a.quotas};
  if (a.seq) unsettled_.insert(a.seq);
  expiry_.emplace(r.expires_ms, a.request_id);
  // Only the token-rate gates that took the estimate are corrected later: a shadow one that
  // had nothing to give took nothing to correct.
  for (size_t i = 0; i < a.buckets.size(); ++i) {
    const LocalBucket& b = a.buckets[i];
    const double took = taken ? (*taken)[i] : b.cost;
    if (b.per_token && took == static_cast<double>(a.tokens)) r.token_gates.push_back(b);
  }
}

int64_t LocalLimiter::remaining(const std::string& tenant) const {
  auto q = quota_.find(tenant);
  return q == quota_.end() ? -1 : std::max<int64_t>(0, q->second.limit - q->second.spent);
}

LocalReservation LocalLimiter::bury(std::unordered_map<std::string, LocalReservation>::iterator it,
                                    int64_t charged) {
  LocalReservation& r = it->second;
  unsettled_.erase(r.seq);
  for (auto [e, end] = expiry_.equal_range(r.expires_ms); e != end; ++e)
    if (e->second == it->first) {
      expiry_.erase(e);
      break;
    }
  auto [t, added] = tenant_index_.try_emplace(r.tenant, static_cast<uint32_t>(tenants_.size()));
  if (added) tenants_.push_back(r.tenant);
  const uint64_t h = hash_(it->first);
  settled_[h] = Settled{charged, r.expires_ms, t->second};
  settled_expiry_.emplace(r.expires_ms, h);
  LocalReservation out = std::move(r);
  reservations_.erase(it);
  return out;
}

std::optional<LocalSettle> LocalLimiter::settle(const std::string& request_id, int64_t tokens,
                                                int64_t now_ms) {
  LocalSettle s;
  auto it = reservations_.find(request_id);
  if (it == reservations_.end()) {
    auto t = settled_.find(hash_(request_id));
    if (t == settled_.end()) return std::nullopt;
    s.charged = t->second.charged;
    s.remaining = remaining(tenants_[t->second.tenant]);
    return s;
  }
  LocalReservation& r = it->second;
  // Past its time a reservation is no longer open: its estimate stays charged, as in Redis.
  if (r.expires_ms <= now_ms) {
    s.charged = r.reserved;
    s.remaining = remaining(r.tenant);
    return s;
  }
  s.first = true;
  s.delta = tokens - r.reserved;
  s.charged = tokens;
  auto q = quota_.find(r.tenant);
  if (q != quota_.end()) q->second.spent += s.delta;
  for (const LocalBucket& b : r.token_gates)
    if (b.capacity >= 0) correct(b, static_cast<double>(s.delta), now_ms);
  s.remaining = remaining(r.tenant);
  s.reservation = bury(it, tokens);
  return s;
}

std::optional<LocalCharge> LocalLimiter::charge(const std::string& request_id, int64_t tokens,
                                                int64_t now_ms) {
  LocalCharge c;
  auto it = reservations_.find(request_id);
  if (it == reservations_.end()) {
    if (!settled_.count(hash_(request_id))) return std::nullopt;
    c.code = LocalCharge::Code::kSettled;
    return c;
  }
  LocalReservation& r = it->second;
  if (r.expires_ms <= now_ms) {
    c.code = LocalCharge::Code::kExpired;
    return c;
  }
  r.reserved += tokens;
  c.charged = r.reserved;
  if (auto q = quota_.find(r.tenant); q != quota_.end()) {
    q->second.spent += tokens;
    Remaining rq;
    rq.gate = "quota";
    rq.limit = static_cast<double>(q->second.limit);
    rq.value = static_cast<double>(std::max<int64_t>(0, q->second.limit - q->second.spent));
    rq.reset_s = std::max<int64_t>(0, r.month_end - now_ms / 1000);
    c.remaining.push_back(rq);
    c.over_quota = q->second.spent > q->second.limit;
    c.quota_reset_ms = rq.reset_s * 1000;
  }
  if (auto l = leases_.find(request_id); l != leases_.end() && l->second.until_ms > now_ms) {
    l->second.until_ms = now_ms + l->second.lease_ms;
    c.lease_left_ms = l->second.lease_ms;
  }
  for (const LocalBucket& b : r.token_gates)
    if (b.capacity >= 0)
      c.remaining.push_back(bucket_remaining(b, correct(b, static_cast<double>(tokens), now_ms)));
  c.reservation = r;
  return c;
}

std::optional<bool> LocalLimiter::release(const std::string& request_id, int64_t now_ms) {
  auto it = leases_.find(request_id);
  if (it == leases_.end()) return std::nullopt;
  bool live = it->second.until_ms > now_ms;
  drop_lease(it);
  return live;
}

void LocalLimiter::sweep(int64_t now_ms) {
  for (auto e = expiry_.begin(); e != expiry_.end() && e->first <= now_ms; e = expiry_.erase(e)) {
    auto r = reservations_.find(e->second);
    if (r == reservations_.end() || r->second.expires_ms != e->first) continue;
    unsettled_.erase(r->second.seq);
    reservations_.erase(r);
  }
  for (; !settled_expiry_.empty() && settled_expiry_.top().first <= now_ms; settled_expiry_.pop()) {
    auto t = settled_.find(settled_expiry_.top().second);
    if (t != settled_.end() && t->second.expires_ms == settled_expiry_.top().first)
      settled_.erase(t);
  }
  // A hash table keeps its buckets and a heap its capacity when emptied: an outage's are given
  // back once few of its reservations are left.
  if (reservations_.bucket_count() > 1024 &&
      reservations_.size() * 8 < reservations_.bucket_count())
    reservations_.rehash(0);
  if (settled_.empty() && settled_.capacity() > 1024) {
    settled_ = {};
    settled_expiry_ = {};
  }
  // A lease's end moves with each charge, so leases are walked, but not on every call.
  if (now_ms - leases_swept_ms_ < 1000) return;
  leases_swept_ms_ = now_ms;
  for (auto it = leases_.begin(); it != leases_.end();)
    it = it->second.until_ms <= now_ms ? drop_lease(it) : std::next(it);
}

void LocalLimiter::put_lease(const std::string& request_id, Lease lease) {
  auto [it, added] = leases_.try_emplace(request_id);
  if (!added) drop_count(it->second.tenant);
  ++held_[lease.tenant];
  it->second = std::move(lease);
}

void LocalLimiter::drop_count(const std::string& tenant) {
  auto h = held_.find(tenant);
  if (h != held_.end() && --h->second == 0) held_.erase(h);
}

std::map<std::string, LocalLimiter::Lease>::iterator LocalLimiter::drop_lease(
    std::map<std::string, Lease>::iterator it) {
  drop_count(it->second.tenant);
  return leases_.erase(it);
}

void LocalLimiter::restore_admit(const LocalAdmit& a, int64_t at_ms, int64_t now_ms) {
  if (a.allowance)
    quota_.try_emplace(a.tenant, Allowance{*a.allowance, 0}).first->second.spent += a.tokens;
  if (at_ms + a.reservation_ttl_ms > now_ms) reserve(a, nullptr, at_ms);
  if (a.max_streams >= 0 && at_ms + a.lease_ms > now_ms)
    put_lease(a.request_id, Lease{a.tenant, at_ms + a.lease_ms, a.lease_ms});
}

void LocalLimiter::restore_settle(const std::string& request_id, int64_t delta) {
  auto it = reservations_.find(request_id);
  if (it == reservations_.end()) return;
  auto q = quota_.find(it->second.tenant);
  if (q != quota_.end()) q->second.spent += delta;
  bury(it, it->second.reserved + delta);
}

void LocalLimiter::restore_charge(const std::string& request_id, int64_t tokens) {
  auto it = reservations_.find(request_id);
  if (it == reservations_.end()) return;
  it->second.reserved += tokens;
  auto q = quota_.find(it->second.tenant);
  if (q != quota_.end()) q->second.spent += tokens;
}

void LocalLimiter::restore_release(const std::string& request_id) {
  if (auto it = leases_.find(request_id); it != leases_.end()) drop_lease(it);
}

}  // namespace dripgate::control
