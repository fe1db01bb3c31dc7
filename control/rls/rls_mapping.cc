#include "control/rls/rls_mapping.h"

#include <algorithm>
#include <cmath>

#include "common/address.h"
#include "common/id.h"
#include "config/config.h"
#include "control/http/api.h"

namespace dripgate::control::rls {
namespace {

// Far above any real request, as the HTTP API's limit; keeps the scripts' sums exact.
constexpr uint64_t kMaxTokens = uint64_t{1} << 50;

std::string at(size_t d, size_t e) {
  return "descriptors[" + std::to_string(d) + "].entries[" + std::to_string(e) + "]";
}

// A domain's descriptor keys, all or those naming `gate`.
std::string keys_of(const std::map<std::string, std::string>& m, const std::string& gate = {}) {
  std::string out;
  for (const auto& [k, g] : m)
    if (gate.empty() || g == gate) out += (out.empty() ? "" : ", ") + k;
  return out;
}

std::string* field_of(AdmitRequest& a, const std::string& gate) {
  if (gate == "tenant") return &a.tenant;
  if (gate == "user") return &a.user;
  if (gate == "api_key") return &a.api_key;
  if (gate == "model") return &a.model;
  if (gate == "tool") return &a.tool;
  if (gate == "ip") return &a.client_ip;
  return nullptr;
}

// The engine's gates behind a descriptor gate: the tenant's plan brings its quota, its
// concurrency and its cap on open reservations with it, and the total gate, which every
// admission passes, is reported where the tenant is named (every request names it). A gate's
// token-rate bucket (tenant_tokens, user_tokens, api_key_tokens, model_tokens) is reported on
// its descriptor too, and the global ip gate on the client address's, like the plan's.
bool covers(const std::string& gate, const std::string& engine_gate) {
  if (gate == "ip" && engine_gate == kGlobalIpGate) return true;
  if (engine_gate.size() == gate.size() + 7 && engine_gate.starts_with(gate) &&
      engine_gate.ends_with("_tokens"))
    return true;
  if (gate == "tenant")
    return engine_gate == "tenant" || config::is_quota_gate(engine_gate) ||
           engine_gate == "concurrency" || engine_gate == "reservations" || engine_gate == "total";
  return gate == engine_gate;
}

int64_t whole(double v) {
  if (!std::isfinite(v) || v <= 0) return 0;
  return static_cast<int64_t>(std::min(std::floor(v), 9e15));
}

Status status_of(const Remaining& g) {
  return Status{false,     g.gate, whole(g.limit), whole(g.value), std::max<int64_t>(0, g.reset_s),
                g.window_s};
}

}  // namespace

std::optional<Problem> map_request(const Domains& domains, const Request& req, Mapped& out) {
  using Kind = Problem::Kind;
  if (req.domain.empty()) return Problem{Kind::kInvalid, "domain", "required"};
  auto dom = domains.find(req.domain);
  if (dom == domains.end())
    return Problem{Kind::kUnknown, "domain", "unknown domain '" + req.domain + "'"};
  if (req.descriptors.empty()) return Problem{Kind::kInvalid, "descriptors", "required"};
  Mapped m;
  std::map<std::string, std::string> named_at;  // gate -> where it was first named
  uint64_t cost = req.hits_addend;
  std::optional<uint64_t> descriptor_cost;
  for (size_t d = 0; d < req.descriptors.size(); ++d) {
    const Descriptor& desc = req.descriptors[d];
    std::string dpath = "descriptors[" + std::to_string(d) + "]";
    if (desc.entries.empty()) return Problem{Kind::kInvalid, dpath + ".entries", "required"};
    // One cost per admission: the largest a descriptor asks for.
    if (desc.hits_addend)
      descriptor_cost = std::max(descriptor_cost.value_or(0), *desc.hits_addend);
    auto& gates = m.gates.emplace_back();
    for (size_t e = 0; e < desc.entries.size(); ++e) {
      const Entry& entry = desc.entries[e];
      if (entry.key.empty()) return Problem{Kind::kInvalid, at(d, e) + ".key", "required"};
      auto g = dom->second.find(entry.key);
      if (g == dom->second.end())
        return Problem{Kind::kUnknown, at(d, e) + ".key",
                       "unknown descriptor key '" + entry.key + "' in domain '" + req.domain +
                           "' (known: " + keys_of(dom->second) + ")"};
      // An address is no id (IPv6 has ':'); two entries naming it agree when they name the same
      // client (::ffff:192.0.2.1 and 192.0.2.1 do). The engine normalises it again, in one place.
      std::optional<std::string> ip;
      if (g->second == "ip") {
        if (!(ip = common::client_ip_key(entry.value)))
          return Problem{Kind::kInvalid, at(d, e) + ".value", "must be an IPv4 or IPv6 address"};
      } else if (!common::valid_id(entry.value)) {
        return Problem{Kind::kInvalid, at(d, e) + ".value", "must match [A-Za-z0-9._-]{1,64}"};
      }
      std::string* slot = field_of(m.admit, g->second);
      if (!slot->empty() && (ip ? common::client_ip_key(*slot) != ip : *slot != entry.value))
        return Problem{
            Kind::kInvalid, at(d, e) + ".value",
            "the " + g->second + " is already '" + *slot + "' (" + named_at[g->second] + ")"};
      if (slot->empty()) named_at[g->second] = at(d, e);
      *slot = entry.value;
      if (std::find(gates.begin(), gates.end(), g->second) == gates.end())
        gates.push_back(g->second);
    }
  }
  if (m.admit.tenant.empty())
    return Problem{Kind::kInvalid, "descriptors",
                   "no entry names the tenant (its keys in domain '" + req.domain +
                       "': " + keys_of(dom->second, "tenant") + ")"};
  if (descriptor_cost) cost = *descriptor_cost;
  if (cost > kMaxTokens)
    return Problem{Kind::kInvalid, descriptor_cost ? "descriptors.hits_addend" : "hits_addend",
                   "too large"};
  m.admit.tokens = static_cast<int64_t>(cost);
  out = std::move(m);
  return std::nullopt;
}

std::vector<Status> statuses(const Mapped& m, const AdmitResult& r) {
  std::vector<Status> out;
  out.reserve(m.gates.size());
  for (const auto& gates : m.gates) {
    auto mine = [&](const std::string& engine_gate) {
      return std::any_of(gates.begin(), gates.end(),
                         [&](const std::string& gate) { return covers(gate, engine_gate); });
    };
    Status s;
    if (r.outcome == Outcome::kRefused && mine(r.gate)) {
      // The refusing gate's numbers when the result has them (a gate that refused before it
      // was counted has none).
      s.gate = r.gate;
      for (const Remaining& g : r.remaining)
        if (g.gate == r.gate) s = status_of(g);
      s.over_limit = true;
      s.reset_s = api::retry_after_seconds(r.retry_after_ms);
    } else {
      bool found = false;
      for (const Remaining& g : r.remaining) {
        if (!mine(g.gate) || (found && whole(g.value) >= s.remaining)) continue;
        s = status_of(g);
        found = true;
      }
    }
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace dripgate::control::rls
