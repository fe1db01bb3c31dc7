#include "control/admission/keys.h"

#include <charconv>
#include <chrono>
#include <cstdio>
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

Months months_around(const common::QuotaCalendar& zone, int64_t unix_s) {
  auto month = [](const common::PeriodSpan& p) {
    return Month{p.label, std::to_string(p.start), std::to_string(p.end), p.start, p.end};
  };
  const auto [prev, cur, next] = zone.around(common::Period::kMonth, unix_s);
  return Months{month(prev), month(cur), month(next)};
}

const Months& current_months(const common::QuotaCalendar& zone, int64_t now_s) {
  // A few zones at most (one per plan): a list, searched by name; an entry is formatted again
  // only when its month ended.
  thread_local std::vector<std::pair<std::string, Months>> zones;
  for (auto& [name, m] : zones)
    if (name == zone.zone()) {
      if (now_s >= m.cur.end || now_s < m.cur.start) m = months_around(zone, now_s);
      return m;
    }
  return zones.emplace_back(zone.zone(), months_around(zone, now_s)).second;
}

void TimeKeys::format(std::shared_ptr<std::string>& buf, std::string_view quota_prefix,
                      std::string_view reservations_prefix, std::string_view ttl_s, int64_t base_w,
                      const Months& months) {
  char num[5][24];
  std::string_view w[5];
  for (int i = 0; i < 5; ++i) {
    auto [end, ec] = std::to_chars(num[i], num[i] + sizeof num[i], base_w - 2 + i);
    w[i] = std::string_view(num[i], static_cast<size_t>(end - num[i]));
  }
  const Month* ms[3] = {&months.prev, &months.cur, &months.next};
  const std::string_view b[4] = {months.prev.start_s, months.cur.start_s, months.cur.end_s,
                                 months.next.end_s};
  size_t n = 0;
  for (const Month* m : ms) n += quota_prefix.size() + m->name.size();
  for (auto x : w) n += reservations_prefix.size() + ttl_s.size() + 1 + x.size();
  for (auto x : b) n += x.size();
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
  for (int i = 0; i < 3; ++i) quota[static_cast<size_t>(i)] = add({quota_prefix, ms[i]->name});
  for (int i = 0; i < 5; ++i)
    windows[static_cast<size_t>(i)] = add({reservations_prefix, ttl_s, ":", w[i]});
  base = windows[2].substr(reservations_prefix.size() + ttl_s.size() + 1);
  for (size_t i = 0; i < bounds.size(); ++i) bounds[i] = add({b[i]});
  buf_ = buf;
}

void TimeKeys::share(const TimeKeys& o) {
  quota = o.quota;
  windows = o.windows;
  base = o.base;
  bounds = o.bounds;
  buf_ = o.buf_;
}

// A thread's newest build per tenant, by what the names are made of. Direct-mapped on the quota
// prefix (the tenant's): tenants that meet in a slot take turns, each build is still correct.
struct TimeKeysCache {
  struct Entry {
    std::string quota_prefix, reservations_prefix, ttl_s;
    int64_t ttl = 0, base_w = 0, prev = 0, cur = 0, next = 0, next_end = 0;
    std::shared_ptr<std::string> buf;  // what keys points into
    TimeKeys keys;
  };
  static constexpr size_t kSlots = 64;
  std::array<Entry, kSlots> slots;

  void build(TimeKeys& out, std::string_view quota_prefix, std::string_view reservations_prefix,
             std::string_view ttl_s, int64_t ttl, int64_t now_s, const Months& months) {
    const int64_t base_w = now_s / ttl;
    Entry& e = slots[std::hash<std::string_view>{}(quota_prefix) % kSlots];
    if (!e.buf || e.base_w != base_w || e.ttl != ttl || e.cur != months.cur.start ||
        e.prev != months.prev.start || e.next != months.next.start ||
        e.next_end != months.next.end || e.quota_prefix != quota_prefix ||
        e.reservations_prefix != reservations_prefix || e.ttl_s != ttl_s) {
      e.keys.format(e.buf, quota_prefix, reservations_prefix, ttl_s, base_w, months);
      e.quota_prefix.assign(quota_prefix);
      e.reservations_prefix.assign(reservations_prefix);
      e.ttl_s.assign(ttl_s);
      e.ttl = ttl;
      e.base_w = base_w;
      e.prev = months.prev.start;
      e.cur = months.cur.start;
      e.next = months.next.start;
      e.next_end = months.next.end;
    }
    out.share(e.keys);
  }
};

void TimeKeys::build(std::string_view quota_prefix, std::string_view reservations_prefix,
                     std::string_view ttl_s, int64_t ttl, int64_t now_s, const Months& months) {
  thread_local TimeKeysCache cache;
  cache.build(*this, quota_prefix, reservations_prefix, ttl_s, ttl, now_s, months);
}

}  // namespace dripgate::control::keys
