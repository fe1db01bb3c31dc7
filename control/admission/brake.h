// The service-wide brake: POST /v1/admin/brake scales every enforced rate (bucket capacity and
// refill) of every daemon sharing the Redis by one factor, for a while, except for the plans it
// exempts. Its state is one key in Redis (keys::brake(), its own hash tag), written with its
// ttl as the key's expiry so that it lifts itself; each daemon polls it (brake_sync.h) and
// publishes what it read through the ConfigStore, where every worker reads it lock-free.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace dripgate::control {

struct Brake {
  // The share of every enforced rate left, in [0, 1]: 0.5 halves capacity and refill, 0 stops
  // every admission that meets a bucket.
  double factor = 1;
  std::vector<std::string> exempt_plans;  // sorted, unique
  int64_t ttl_s = 0;                      // as set (POST); as left when read back (GET)

  // Whether a request of `plan` is braked.
  bool applies_to(std::string_view plan) const {
    return factor < 1 && !std::binary_search(exempt_plans.begin(), exempt_plans.end(), plan);
  }
  bool operator==(const Brake&) const = default;
};

// The longest a brake may last (s): an emergency measure, set again to go on.
inline constexpr int64_t kMaxBrakeTtlS = 86400;

}  // namespace dripgate::control
