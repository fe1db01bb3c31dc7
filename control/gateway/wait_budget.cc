#include "control/gateway/wait_budget.h"

#include <absl/hash/hash.h>

namespace dripgate::control {

namespace {

// Debian's Abseil looks names up by its own string_view, not std::string_view.
absl::string_view name(std::string_view s) {
  return {s.data(), s.size()};
}

}  // namespace

WaitBudget::Stripe& WaitBudget::stripe(std::string_view tenant) const {
  return stripes_[absl::Hash<absl::string_view>{}(name(tenant)) % stripes_.size()];
}

WaitBudget::Taken WaitBudget::take(std::string_view tenant, int64_t max_waiters,
                                   int64_t max_per_tenant) {
  if (total_.fetch_add(1, std::memory_order_relaxed) >= max_waiters) {
    total_.fetch_sub(1, std::memory_order_relaxed);
    return Taken::kQueueFull;
  }
  Stripe& s = stripe(tenant);
  std::lock_guard lock(s.mu);
  auto it = s.tenants.find(name(tenant));
  if ((it == s.tenants.end() ? 0 : it->second) >= max_per_tenant) {
    total_.fetch_sub(1, std::memory_order_relaxed);
    return Taken::kTenantFull;
  }
  if (it == s.tenants.end()) it = s.tenants.emplace(std::string(tenant), 0).first;
  ++it->second;
  return Taken::kYes;
}

void WaitBudget::give(std::string_view tenant) {
  total_.fetch_sub(1, std::memory_order_relaxed);
  Stripe& s = stripe(tenant);
  std::lock_guard lock(s.mu);
  auto it = s.tenants.find(name(tenant));
  if (it != s.tenants.end() && --it->second <= 0) s.tenants.erase(it);
}

size_t WaitBudget::tenant_size(std::string_view tenant) const {
  Stripe& s = stripe(tenant);
  std::lock_guard lock(s.mu);
  auto it = s.tenants.find(name(tenant));
  return it == s.tenants.end() ? 0 : static_cast<size_t>(it->second);
}

}  // namespace dripgate::control
