// The daemon's bounds on waiting requests (control.queue), counted across every worker: each
// worker's gateway keeps a WaitQueue of its own, while a tenant's waiters and the daemon's are
// limited as a whole, so a tenant whose connections all land on one worker gets its whole
// allowance there, and no worker's share of places sits unused while another turns requests away.
// Taken once per request that starts waiting and given back once when it stops, never per retry:
// a lock of one of 64 stripes then is not on any hot path.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>

#include <absl/container/flat_hash_map.h>

namespace dripgate::control {

class WaitBudget {
 public:
  enum class Taken : uint8_t { kYes, kQueueFull, kTenantFull };
  // A place for a waiter of tenant, within max_waiters in all and max_per_tenant of the tenant.
  Taken take(std::string_view tenant, int64_t max_waiters, int64_t max_per_tenant);
  // Gives back a place take() gave.
  void give(std::string_view tenant);
  size_t size() const { return total_.load(std::memory_order_relaxed); }
  size_t tenant_size(std::string_view tenant) const;

 private:
  struct Stripe {
    mutable std::mutex mu;
    absl::flat_hash_map<std::string, int64_t> tenants;  // only those with waiters
  };
  Stripe& stripe(std::string_view tenant) const;
  std::atomic<int64_t> total_{0};
  mutable std::array<Stripe, 64> stripes_;
};

}  // namespace dripgate::control
