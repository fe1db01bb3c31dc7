#include "control/keys.h"

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

std::string_view tenant_of_request_id(std::string_view request_id) {
  auto dot = request_id.rfind('.');
  if (dot == std::string_view::npos) return {};
  return request_id.substr(0, dot);
}

}  // namespace dripgate::control::keys
