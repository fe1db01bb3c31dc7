// One daemon's copy of the tenant registry (tenant_registry.h): tenant -> plan name and API
// keys (tenant_keys.h), as Redis held it at `version`. Immutable once built; a refresh builds a new
// one and publishes it through the ConfigStore, so a request looks its tenant up in memory, without
// a Redis round trip or a lock, and keeps the copy it started with.
//
// A copy is a large base (shared between copies, never changed) and the recent changes on top
// of it: a change costs a copy of the recent ones, not of 100,000 tenants; once the recent ones
// reach kMaxRecent they are folded into a new base (a whole copy, once per kMaxRecent changes).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "control/admission/tenant_keys.h"

namespace dripgate::control {

class TenantDirectory {
 public:
  // A tenant as the registry holds it: the plan, then its keys (parse_registry_keys).
  struct Registered {
    std::string plan;  // empty: taken out
    std::vector<TenantKey> keys;
    Registered() = default;
    // The registry hash's value as Redis holds it (implicit: that is what a tenant is there).
    Registered(std::string_view value);  // NOLINT(google-explicit-constructor)
    Registered(const std::string& value) : Registered(std::string_view(value)) {}  // NOLINT
    Registered(const char* value) : Registered(std::string_view(value)) {}         // NOLINT
  };
  using Plans = std::unordered_map<std::string, Registered>;
  using Changes = std::vector<std::pair<std::string, Registered>>;
  // A tenant and its plan, as page() lists them.
  using Entry = std::pair<std::string_view, std::string_view>;
  static constexpr size_t kMaxRecent = 1024;

  // A whole copy.
  TenantDirectory(uint64_t version, Plans plans);
  // prev's tenants with `changes` applied in order (plan "": the tenant was taken out).
  TenantDirectory(const TenantDirectory& prev, uint64_t version, const Changes& changes);
  TenantDirectory(const TenantDirectory&) = delete;
  TenantDirectory& operator=(const TenantDirectory&) = delete;

  // The count of changes ever made to the registry (lua/registry_write.lua) this copy holds.
  uint64_t version() const { return version_; }
  size_t size() const { return size_; }
  // The tenant's plan, or nullptr when the registry does not name the tenant.
  const std::string* plan_of(const std::string& tenant) const {
    const Registered* r = find(tenant);
    return r ? &r->plan : nullptr;
  }
  // The tenant's keys, expired ones included; nullptr when the registry does not name it.
  const std::vector<TenantKey>* keys_of(const std::string& tenant) const {
    const Registered* r = find(tenant);
    return r ? &r->keys : nullptr;
  }
  // The tenant that holds a key valid at now_s with this digest, or nullptr.
  const std::string* owner_of(const KeyDigest& d, int64_t now_s) const;
  // Up to `limit` tenants in id order, the first after `after` (empty: from the start). A page
  // starts after the last id of the previous one, so changes elsewhere never shift it.
  std::vector<Entry> page(std::string_view after, size_t limit) const;

 private:
  using Owners = std::unordered_map<KeyDigest, std::string, KeyDigestHash>;
  struct Base {
    Plans plans;
    std::vector<const Plans::value_type*> order;  // by id, into plans (its nodes do not move)
    Owners owners;                                // each key's tenant
    explicit Base(Plans p);
  };
  const Registered* find(const std::string& tenant) const {
    if (auto it = recent_.find(tenant); it != recent_.end())
      return it->second.plan.empty() ? nullptr : &it->second;
    auto it = base_->plans.find(tenant);
    return it == base_->plans.end() ? nullptr : &it->second;
  }
  uint64_t version_;
  std::shared_ptr<const Base> base_;
  Plans recent_;  // changes since base_: tenant -> plan ("": taken out)
  std::vector<const Plans::value_type*> recent_order_;  // by id, into recent_
  Owners recent_owners_;                                // the keys of recent_'s tenants
  size_t size_ = 0;

  void sort_recent();
};

}  // namespace dripgate::control
