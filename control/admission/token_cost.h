// A settle's or charge's token count split by type, and what it costs against a plan's quota and
// token-rate gates: the plan's weights (config::TokenWeights) applied once, here, so that the
// scripts receive one integer and stay as they are for a plain count.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "config/config.h"

namespace dripgate::control {

struct Tables;
class TenantDirectory;

// The tokens one request used, by type (`tokens: {input, output, cached_input, reasoning}` in
// the API), each a count >= 0 the API checked; the types are disjoint (config::TokenWeights).
struct TokenCounts {
  int64_t input = 0, output = 0, cached_input = 0, reasoning = 0;

  bool operator==(const TokenCounts&) const = default;
};

// Σ weight · count, rounded up to a whole token: the scripts count whole tokens, and up, not to
// the nearest, so that what is charged is never less than what the weights say (a stream's
// charges each round up: at most one token more per charge). nullopt when the cost exceeds
// `max`.
std::optional<int64_t> weighted_tokens(const TokenCounts& n, const config::TokenWeights& w,
                                       int64_t max);

// The weighted cost of `typed` on the plan of `tenant` (or of the tenant an engine-generated
// request_id names; an admission's estimate, whose request_id may be empty, on its tenant's)
// into `out`; an error naming the field ("tenant: …", "tokens: …") when the tenant is unknown or
// the cost too large.
std::string weigh_tokens(const Tables& tables, const TenantDirectory* registry, std::string tenant,
                         const std::string& request_id, const TokenCounts& typed, int64_t& out);

}  // namespace dripgate::control
