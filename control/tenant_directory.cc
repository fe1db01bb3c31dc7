#include "control/tenant_directory.h"

#include <algorithm>

namespace dripgate::control {

TenantDirectory::TenantDirectory(uint64_t version, Plans plans)
    : version_(version), plans_(std::move(plans)) {
  order_.reserve(plans_.size());
  for (const Entry& e : plans_) order_.push_back(&e);
  std::sort(order_.begin(), order_.end(),
            [](const Entry* a, const Entry* b) { return a->first < b->first; });
}

std::vector<const TenantDirectory::Entry*> TenantDirectory::page(std::string_view after,
                                                                 size_t limit) const {
  auto it = order_.begin();
  if (!after.empty())
    it = std::upper_bound(order_.begin(), order_.end(), after,
                          [](std::string_view a, const Entry* e) { return a < e->first; });
  std::vector<const Entry*> out;
  for (; it != order_.end() && out.size() < limit; ++it) out.push_back(*it);
  return out;
}

}  // namespace dripgate::control
