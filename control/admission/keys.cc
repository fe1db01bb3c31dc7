#include "control/admission/keys.h"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <deque>
#include <functional>
#include <utility>
#include <vector>

#include "control/redis/wall_clock.h"

namespace dripgate::control::keys {

namespace {

std::string join(std::initializer_list<std::string_view> parts) {
  size_t n = 0;
  for (auto p : parts) n += p.size();
  std::string out;
  out.reserve(n);
  for (auto p : parts) out.append(p);
  return out;
}

}  // namespace

std::string tenant_prefix(std::string_view tenant) {
  return join({"dg:{t:", tenant, "}:"});
}

std::string bucket(std::string_view tenant, std::string_view gate, std::string_view id) {
  if (id.empty()) return join({"dg:{t:", tenant, "}:tb:", gate});
  return join({"dg:{t:", tenant, "}:tb:", gate, ":", id});
}

std::string window(std::string_view tenant, std::string_view gate, std::string_view id) {
  if (id.empty()) return join({"dg:{t:", tenant, "}:sw:", gate});
  return join({"dg:{t:", tenant, "}:sw:", gate, ":", id});
}

std::string quota_prefix(std::string_view tenant) {
  return join({"dg:{t:", tenant, "}:q:"});
}

std::string quota(std::string_view tenant, std::string_view month) {
  return join({"dg:{t:", tenant, "}:q:", month});
}

std::string quota_counter(std::string_view prefix, std::string_view label) {
  return join({prefix, label});
}

std::string applied(std::string_view tenant, std::string_view journal) {
  return join({"dg:{t:", tenant, "}:applied:", journal});
}

std::string global_applied(std::string_view kind, std::string_view name, std::string_view journal) {
  return join({"dg:{g:", kind, ":", name, "}:applied:", journal});
}

std::string reservations(std::string_view tenant) {
  return join({"dg:{t:", tenant, "}:r:"});
}

std::string leases(std::string_view tenant) {
  return join({"dg:{t:", tenant, "}:leases"});
}

std::string global_attempt(std::string_view kind, std::string_view name, std::string_view attempt) {
  return join({"dg:{g:", kind, ":", name, "}:a:", attempt});
}

std::string global_taken(std::string_view kind, std::string_view name, std::string_view rid) {
  return join({"dg:{g:", kind, ":", name, "}:s:", rid});
}

std::string global_bucket(std::string_view kind, std::string_view name) {
  return join({"dg:{g:", kind, ":", name, "}:tb"});
}

std::string global_window(std::string_view kind, std::string_view name) {
  return join({"dg:{g:", kind, ":", name, "}:sw"});
}

std::string global_waiters(std::string_view kind, std::string_view name) {
  return join({"dg:{g:", kind, ":", name, "}:wq"});
}

std::string brake() {
  return "dg:{brake}:state";
}

std::string registry_tenants() {
  return "dg:{registry}:tenants";
}

std::string registry_version() {
  return "dg:{registry}:version";
}

std::string registry_log() {
  return "dg:{registry}:log";
}

std::string total_bucket() {
  return "dg:{g:total}:tb";
}

std::string total_window() {
  return "dg:{g:total}:sw";
}

std::string total_waiters() {
  return "dg:{g:total}:wq";
}

std::string total_attempt(std::string_view attempt) {
  return join({"dg:{g:total}:a:", attempt});
}

std::string_view tenant_of_request_id(std::string_view request_id) {
  auto dot = request_id.rfind('.');
  if (dot == std::string_view::npos) return {};
  return request_id.substr(0, dot);
}

Month month_of(int64_t unix_s) {
  namespace chr = std::chrono;
  auto day = chr::floor<chr::days>(chr::sys_seconds(chr::seconds(unix_s)));
  chr::year_month_day ymd{day};
  auto first = chr::sys_days(ymd.year() / ymd.month() / 1);
  auto next = chr::sys_days((ymd.year() / ymd.month() + chr::months(1)) / 1);
  Month m;
  char name[16];
  std::snprintf(name, sizeof name, "%04d-%02u", static_cast<int>(ymd.year()),
                static_cast<unsigned>(ymd.month()));
  m.name = name;
  m.start = chr::sys_seconds(first).time_since_epoch().count();
  m.end = chr::sys_seconds(next).time_since_epoch().count();
  m.start_s = std::to_string(m.start);
  m.end_s = std::to_string(m.end);
  return m;
}

Months months_around(int64_t unix_s) {
  Months m;
  m.cur = month_of(unix_s);
  m.prev = month_of(m.cur.start - 1);
  m.next = month_of(m.cur.end);
  return m;
}

const Months& current_months(int64_t now_s) {
  thread_local Months m;
  if (now_s >= m.cur.end || now_s < m.cur.start) m = months_around(now_s);
  return m;
}

const Months& current_months() {
  return current_months(wall_s());
}

Months periods_around(const common::QuotaCalendar& zone, common::Period period, int64_t unix_s) {
  auto month = [](const common::PeriodSpan& p) {
    return Month{p.label, std::to_string(p.start), std::to_string(p.end), p.start, p.end};
  };
  const auto [prev, cur, next] = zone.around(period, unix_s);
  return Months{month(prev), month(cur), month(next)};
}

Months months_around(const common::QuotaCalendar& zone, int64_t unix_s) {
  return periods_around(zone, common::Period::kMonth, unix_s);
}

const Months& current_periods(const common::QuotaCalendar& zone, common::Period period,
                              int64_t now_s) {
  // A few zones and periods at most (the plans'): a list, searched by name and period; an entry
  // is formatted again only when its period ended.
  struct Entry {
    std::string zone;
    common::Period period;
    Months m;
  };
  // A deque: an entry stays where it is while others are added (callers hold references).
  thread_local std::deque<Entry> entries;
  for (Entry& e : entries)
    if (e.period == period && e.zone == zone.zone()) {
      if (now_s >= e.m.cur.end || now_s < e.m.cur.start) e.m = periods_around(zone, period, now_s);
      return e.m;
    }
  return entries.emplace_back(Entry{zone.zone(), period, periods_around(zone, period, now_s)}).m;
}

const Months& current_months(const common::QuotaCalendar& zone, int64_t now_s) {
  return current_periods(zone, common::Period::kMonth, now_s);
}

void TimeKeys::format(std::shared_ptr<std::string>& buf, std::string_view quota_prefix,
                      std::string_view reservations_prefix, std::string_view ttl_s, int64_t base_w,
                      std::span<const Months* const> periods) {
  char num[5][24];
  std::string_view w[5];
  for (int i = 0; i < 5; ++i) {
    auto [end, ec] = std::to_chars(num[i], num[i] + sizeof num[i], base_w - 2 + i);
    w[i] = std::string_view(num[i], static_cast<size_t>(end - num[i]));
  }
  auto bounds_of = [](const Months& m) {
    return std::array<std::string_view, 4>{m.prev.start_s, m.cur.start_s, m.cur.end_s,
                                           m.next.end_s};
  };
  size_t n = 0;
  for (const Months* m : periods) {
    for (const Month* x : {&m->prev, &m->cur, &m->next}) n += quota_prefix.size() + x->name.size();
    for (auto x : bounds_of(*m)) n += x.size();
  }
  for (auto x : w) n += reservations_prefix.size() + ttl_s.size() + 1 + x.size();
  // A buffer another build still points into is left to it.
  buf_.reset();
  if (!buf || buf.use_count() > 1) buf = std::make_shared<std::string>();
  std::string& out = *buf;
  // Reserved in full first: the views below stay valid.
  out.clear();
  out.reserve(n);
  auto add = [&](std::initializer_list<std::string_view> parts) {
    const size_t at = out.size();
    for (auto p : parts) out.append(p);
    return std::string_view(out).substr(at);
  };
  nq = std::min(periods.size(), kMaxQuotas);
  for (size_t q = 0; q < nq; ++q) {
    const Months& m = *periods[q];
    const Month* ms[3] = {&m.prev, &m.cur, &m.next};
    for (size_t i = 0; i < 3; ++i) quotas[q].keys[i] = add({quota_prefix, ms[i]->name});
    const auto b = bounds_of(m);
    for (size_t i = 0; i < b.size(); ++i) quotas[q].bounds[i] = add({b[i]});
  }
  for (int i = 0; i < 5; ++i)
    windows[static_cast<size_t>(i)] = add({reservations_prefix, ttl_s, ":", w[i]});
  base = windows[2].substr(reservations_prefix.size() + ttl_s.size() + 1);
  buf_ = buf;
}

void TimeKeys::share(const TimeKeys& o) {
  quotas = o.quotas;
  nq = o.nq;
  windows = o.windows;
  base = o.base;
  buf_ = o.buf_;
}

// A thread's newest build per tenant, by what the names are made of. Direct-mapped on the quota
// prefix (the tenant's): tenants that meet in a slot take turns, each build is still correct.
struct TimeKeysCache {
  // What a quota's names are made of: where its previous, current and next periods begin and
  // where the next one ends.
  using Bounds = std::array<int64_t, 4>;
  struct Entry {
    std::string quota_prefix, reservations_prefix, ttl_s;
    int64_t ttl = 0, base_w = 0;
    std::array<Bounds, TimeKeys::kMaxQuotas> bounds{};
    size_t nq = 0;
    std::shared_ptr<std::string> buf;  // what keys points into
    TimeKeys keys;
  };
  static constexpr size_t kSlots = 64;
  std::array<Entry, kSlots> slots;

  static Bounds bounds_of(const Months& m) {
    return {m.prev.start, m.cur.start, m.next.start, m.next.end};
  }
  static bool same(const Entry& e, std::span<const Months* const> periods) {
    if (e.nq != periods.size()) return false;
    for (size_t q = 0; q < e.nq; ++q)
      if (e.bounds[q] != bounds_of(*periods[q])) return false;
    return true;
  }

  void build(TimeKeys& out, std::string_view quota_prefix, std::string_view reservations_prefix,
             std::string_view ttl_s, int64_t ttl, int64_t now_s,
             std::span<const Months* const> periods) {
    const int64_t base_w = now_s / ttl;
    Entry& e = slots[std::hash<std::string_view>{}(quota_prefix) % kSlots];
    if (!e.buf || e.base_w != base_w || e.ttl != ttl || !same(e, periods) ||
        e.quota_prefix != quota_prefix || e.reservations_prefix != reservations_prefix ||
        e.ttl_s != ttl_s) {
      e.keys.format(e.buf, quota_prefix, reservations_prefix, ttl_s, base_w, periods);
      e.quota_prefix.assign(quota_prefix);
      e.reservations_prefix.assign(reservations_prefix);
      e.ttl_s.assign(ttl_s);
      e.ttl = ttl;
      e.base_w = base_w;
      e.nq = std::min(periods.size(), TimeKeys::kMaxQuotas);
      for (size_t q = 0; q < e.nq; ++q) e.bounds[q] = bounds_of(*periods[q]);
    }
    out.share(e.keys);
  }
};

void TimeKeys::build(std::string_view quota_prefix, std::string_view reservations_prefix,
                     std::string_view ttl_s, int64_t ttl, int64_t now_s,
                     std::span<const Months* const> periods) {
  thread_local TimeKeysCache cache;
  cache.build(*this, quota_prefix, reservations_prefix, ttl_s, ttl, now_s, periods);
}

}  // namespace dripgate::control::keys
