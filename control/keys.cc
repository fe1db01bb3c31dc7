#include "control/keys.h"

#include <chrono>
#include <cstdio>

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

std::string quota_prefix(std::string_view tenant) {
  return join({"dg:{t:", tenant, "}:q:"});
}

std::string quota(std::string_view tenant, std::string_view month) {
  return join({"dg:{t:", tenant, "}:q:", month});
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

std::string global_bucket(std::string_view kind, std::string_view name) {
  return join({"dg:{g:", kind, ":", name, "}:tb"});
}

std::string total_bucket() {
  return "dg:{g:total}:tb";
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

const Month& current_month() {
  thread_local Month m;
  auto now = std::chrono::duration_cast<std::chrono::seconds>(
                 std::chrono::system_clock::now().time_since_epoch())
                 .count();
  if (now >= m.end || now < m.start) m = month_of(now);
  return m;
}

}  // namespace dripgate::control::keys
