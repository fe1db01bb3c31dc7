#include "dataplane/tenants.h"

#include <algorithm>
#include <cstring>

#include "common/id.h"

namespace dripgate::dataplane {

TenantTable::TenantTable(uint32_t max_tenants) : max_(std::min(max_tenants, kMaxTenants)) {}

uint32_t TenantTable::intern(std::string_view name) {
  if (name.size() > kMaxName || !common::valid_id(name)) return kNone;
  if (auto it = ids_.find(name); it != ids_.end()) return it->second;
  const uint32_t n = size_.load(std::memory_order_relaxed);
  if (n >= max_) {
    untracked_.fetch_add(1, std::memory_order_relaxed);
    return kNone;
  }
  const uint32_t id = n + 1;
  std::unique_ptr<Slot[]>& chunk = chunks_[id >> kChunkLog2];
  if (!chunk) chunk = std::make_unique<Slot[]>(kChunk);
  Slot& s = chunk[id & (kChunk - 1)];
  s.len = static_cast<uint8_t>(name.size());
  std::memcpy(s.text, name.data(), name.size());
  ids_.emplace(std::string(name), id);
  // Publishes the slot (and its chunk) to readers.
  size_.store(id, std::memory_order_release);
  return id;
}

std::string_view TenantTable::name(uint32_t id) const noexcept {
  if (id == kNone || id > size()) return {};
  const Slot& s = chunks_[id >> kChunkLog2][id & (kChunk - 1)];
  return std::string_view(s.text, s.len);
}

}  // namespace dripgate::dataplane
