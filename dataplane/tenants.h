// Tenant names interned into dense ids, so a flow's tag carries its tenant in four bytes and a
// per-tenant table is an array. Ids run 1..size() in the order the tenants were first seen; 0
// is "no tenant" (an untagged flow, a tag without one, or one past the bound). Free of DPDK.
//
// Threads: one writer (the main lcore: the control socket interns a tag's tenant) and any
// number of readers of id -> name (stats, telemetry, the drip lcore's per-tenant counters). A
// name is written into its preallocated slot before size() is raised with a release store, and
// never changes afterwards, so a reader that loads size() (acquire) may read every name below
// it without a lock. Ids are never reused: a tenant keeps its id for the process's life, and
// the table holds at most max_tenants of them (each costs one 65-byte slot, allocated in
// chunks as the ids are handed out).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>

namespace dripgate::dataplane {

class TenantTable {
 public:
  static constexpr uint32_t kNone = 0;
  // The most ids, and the default bound: ids fit 16 bits where a per-flow cache keeps them.
  static constexpr uint32_t kMaxTenants = 65535;
  // A tenant name is an id of dripgate's one rule (common::valid_id): at most 64 characters.
  static constexpr size_t kMaxName = 64;

  explicit TenantTable(uint32_t max_tenants = kMaxTenants);
  TenantTable(const TenantTable&) = delete;
  TenantTable& operator=(const TenantTable&) = delete;

  // ---- the writer ----

  // name's id, given a new one on first sight. kNone when name is not a valid id (the caller
  // checks first and names the field), and when the table is full: the tag still stands, its
  // flow has no tenant, and untracked() counts it. Allocates nothing for a known name, and
  // only when a new id opens a chunk otherwise (plus the name index's node).
  uint32_t intern(std::string_view name);

  // ---- any thread ----

  // The name of id, or "" for kNone and for an id not handed out (yet).
  std::string_view name(uint32_t id) const noexcept;
  // The ids handed out: 1..size().
  uint32_t size() const noexcept { return size_.load(std::memory_order_acquire); }
  uint32_t capacity() const noexcept { return max_; }
  // Tags whose tenant found the table full, so their flows carry kNone.
  uint64_t untracked() const noexcept { return untracked_.load(std::memory_order_relaxed); }

 private:
  struct Slot {
    uint8_t len;
    char text[kMaxName];
  };
  static constexpr uint32_t kChunkLog2 = 10;  // 1024 names a chunk
  static constexpr uint32_t kChunk = 1u << kChunkLog2;
  static constexpr uint32_t kMaxChunks = (kMaxTenants + kChunk) / kChunk;

  struct Hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const noexcept {
      return std::hash<std::string_view>{}(s);
    }
  };

  uint32_t max_;
  std::atomic<uint32_t> size_{0};
  std::atomic<uint64_t> untracked_{0};
  // chunks_[c] holds the slots of ids c * kChunk .. (c + 1) * kChunk - 1 (id 0's slot unused).
  // Written by the writer before the size that makes its first id visible is published.
  std::unique_ptr<Slot[]> chunks_[kMaxChunks];
  // Writer-only: name -> id, looked up by string_view.
  std::unordered_map<std::string, uint32_t, Hash, std::equal_to<>> ids_;
};

}  // namespace dripgate::dataplane
