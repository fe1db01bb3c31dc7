#include "control/admission/config_snapshot.h"

#include <utility>

#include "common/id.h"

namespace dripgate::control {

Snapshot::Snapshot(config::Config c, std::string h)
    : cfg(std::move(c)), tables(cfg), file_keys(cfg), hash(std::move(h)) {}

std::string_view Snapshot::tenant_label(const std::string& tenant,
                                        const TenantDirectory* registry) const {
  if (tables.tenants.count(tenant)) return tenant;
  if (registry && registry->plan_of(tenant)) return "@registry";
  if (tables.any && common::valid_id(tenant)) return config::kAnyTenant;
  return {};
}

const config::Plan* plan_of(const config::Config& cfg, const std::string& tenant,
                            const TenantDirectory* registry) {
  const std::string* plan = registry ? registry->plan_of(tenant) : nullptr;
  if (!plan) {
    auto t = cfg.tenants.find(tenant);
    if (t == cfg.tenants.end()) t = cfg.tenants.find(std::string(config::kAnyTenant));
    if (t != cfg.tenants.end()) plan = &t->second.plan;
  }
  if (!plan) return nullptr;
  auto p = cfg.plans.find(*plan);
  return p == cfg.plans.end() ? nullptr : &p->second;
}

ConfigStore::ConfigStore(std::shared_ptr<const Snapshot> first) : snap_(std::move(first)) {}

ConfigStore::ConfigStore(config::Config cfg)
    : snap_(std::make_shared<const Snapshot>(std::move(cfg), std::string())) {}

void ConfigStore::publish(std::shared_ptr<const Snapshot> next) {
  std::lock_guard lock(mu_);
  snap_ = std::move(next);
  // Moved under the lock, after the pointer: a view that sees the new generation then reads
  // (under the lock) this snapshot or a later one.
  generation_.fetch_add(1, std::memory_order_release);
}

std::shared_ptr<const Snapshot> ConfigStore::current() const {
  std::lock_guard lock(mu_);
  return snap_;
}

}  // namespace dripgate::control
