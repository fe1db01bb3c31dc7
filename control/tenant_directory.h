// One daemon's copy of the tenant registry (tenant_registry.h): tenant -> plan name, as Redis
// held it at `version`. Immutable once built; a refresh builds a new one and publishes it through
// the ConfigStore, so a request looks its tenant up in memory, without a Redis round trip or a
// lock, and keeps the copy it started with.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace dripgate::control {

class TenantDirectory {
 public:
  using Plans = std::unordered_map<std::string, std::string>;
  using Entry = Plans::value_type;

  TenantDirectory(uint64_t version, Plans plans);
  TenantDirectory(const TenantDirectory&) = delete;
  TenantDirectory& operator=(const TenantDirectory&) = delete;

  // The count of changes ever made to the registry (lua/registry_write.lua) this copy holds.
  uint64_t version() const { return version_; }
  size_t size() const { return plans_.size(); }
  const Plans& plans() const { return plans_; }
  // The tenant's plan, or nullptr when the registry does not name the tenant.
  const std::string* plan_of(const std::string& tenant) const {
    auto it = plans_.find(tenant);
    return it == plans_.end() ? nullptr : &it->second;
  }
  // Up to `limit` entries in id order, the first after `after` (empty: from the start). A page
  // starts after the last id of the previous one, so changes elsewhere never shift it.
  std::vector<const Entry*> page(std::string_view after, size_t limit) const;

 private:
  uint64_t version_;
  Plans plans_;
  std::vector<const Entry*> order_;  // by id, pointing into plans_ (its nodes do not move)
};

}  // namespace dripgate::control
