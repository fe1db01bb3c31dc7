#include "control/admission/token_cost.h"

#include "control/admission/script_calls.h"

namespace dripgate::control {

std::optional<int64_t> weighted_tokens(const TokenCounts& n, const config::TokenWeights& w,
                                       int64_t max) {
  // Each count is below 2^50 (the API) and each weight below 2^30: four products stay far
  // inside 128 bits.
  const __int128 sum = static_cast<__int128>(n.input) * w.input +
                       static_cast<__int128>(n.output) * w.output +
                       static_cast<__int128>(n.cached_input) * w.cached_input +
                       static_cast<__int128>(n.reasoning) * w.reasoning;
  const __int128 one = config::TokenWeights::kOne;
  const __int128 cost = (sum + one - 1) / one;
  if (cost > max) return std::nullopt;
  return static_cast<int64_t>(cost);
}

std::string weigh_tokens(const Tables& tables, const TenantDirectory* registry, std::string tenant,
                         const std::string& request_id, const TokenCounts& typed, int64_t& out) {
  const TenantInfo* t = nullptr;
  std::shared_ptr<const TenantInfo> unlisted;
  std::string err;
  if (request_id.empty() && !tenant.empty()) {
    // An admission's estimate: it names its tenant, and may leave its request_id to the engine.
    t = tables.find(tenant, unlisted, registry, &err);
    if (!t && err.empty()) err = "tenant: unknown tenant '" + tenant + "'";
  } else {
    err = resolve(tables, tenant, request_id, &t, unlisted, registry);
  }
  if (!err.empty()) return err;
  std::optional<int64_t> cost = weighted_tokens(typed, t->plan->weights, kMaxTokenCost);
  if (!cost)
    return "tokens: the weighted count exceeds " + std::to_string(kMaxTokenCost) + " tokens";
  out = *cost;
  return {};
}

}  // namespace dripgate::control
