// A per-lcore memo of how IPv4 flows were classified, so a flow seen again skips the flow
// table's probe and the rules. Header-only and free of DPDK so it is tested on its own; the
// lcore that classifies owns one and nothing else touches it.
//
// What it holds is the class before unknown_flows applies (a tag, a rule's class, or kNoMatch),
// and the tag's tenant id (0 for an untagged flow), per 5-tuple and DSCP (rules may match DSCP). An
// entry stands for a lookup only while nothing that decided it changed:
//  * the flow table: observe() at each burst's start with FlowTable::generation(), which the
//    writers bump after every change (tag, re-tag, untag, sweep); a new generation forgets
//    every entry, so a change is seen from the next burst on, as with the probe itself;
//  * the rules: invalidate() when the lcore switches to a reloaded classifier;
//  * time: an entry lives until the valid_until given to put(): for a tagged flow the caller
//    gives no more than the tag's expiry and the table's last-seen refresh period, so a tag
//    expires on time and a busy tagged flow still refreshes its last-seen time through a real
//    lookup; an untagged flow's class depends on nothing that changes with time, and its entry
//    is given a second.
// Forgetting is O(1): entries carry the epoch they were made in. The 32-bit epoch may wrap, but
// no entry outlives a second, far shorter than 2^32 changes take (at most one per burst).
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>

#include "dataplane/parse.h"
#include "dataplane/tenants.h"

namespace dripgate::dataplane {

class ClassCache {
  struct Set;

 public:
  // 2^log2_sets sets of two entries, each set one 64-byte cache line.
  explicit ClassCache(unsigned log2_sets = 11)
      : mask_((1u << log2_sets) - 1), sets_(std::make_unique<Set[]>(size_t{mask_} + 1)) {}

  // The flow table's generation at the start of a burst: everything cached under another one
  // is forgotten.
  void observe(uint64_t table_generation) {
    if (table_generation != seen_) {
      seen_ = table_generation;
      ++epoch_;
    }
  }
  // Forgets everything (the rules changed).
  void invalidate() { ++epoch_; }

  // What a burst's lookups read of the cache, copied by value into the caller's registers:
  // called through the cache object, each packet's find reloaded the table's
  // address, mask and epoch, since the caller's byte stores between them may alias anything.
  // Valid until the next observe(), invalidate() or put().
  class Reader {
   public:
    // The class (and, when tenant is not null, the tenant id) cached for (key, dscp) at `now`;
    // hash is FlowTable::hash_ipv4(key).
    bool find(const Ipv4Key& key, uint8_t dscp, uint32_t hash, uint64_t now, int* cls,
              uint32_t* tenant = nullptr) const {
      const Words w = words(key, dscp);
      const Set& s = sets_[hash & mask_];
      for (const Entry& e : s.way) {
        if (e.w0 == w.w0 && e.w1 == w.w1 && e.epoch == epoch_ && now < e.valid_until) {
          *cls = e.cls;
          if (tenant != nullptr) *tenant = e.tenant;
          return true;
        }
      }
      return false;
    }

   private:
    friend class ClassCache;
    Reader(const Set* sets, uint32_t mask, uint32_t epoch)
        : sets_(sets), mask_(mask), epoch_(epoch) {}
    const Set* sets_;
    uint32_t mask_;
    uint32_t epoch_;
  };
  Reader reader() const { return Reader(sets_.get(), mask_, epoch_); }

  bool find(const Ipv4Key& key, uint8_t dscp, uint32_t hash, uint64_t now, int* cls,
            uint32_t* tenant = nullptr) const {
    return reader().find(key, dscp, hash, now, cls, tenant);
  }
  // Remembers cls and tenant for (key, dscp) until valid_until (exclusive), as the set's newest
  // entry; the older one of the set is the one replaced. cls fits 16 bits (a class index or
  // kNoMatch), as tenant does (a TenantTable id).
  void put(const Ipv4Key& key, uint8_t dscp, uint32_t hash, int cls, uint64_t valid_until,
           uint32_t tenant = 0) {
    const Words w = words(key, dscp);
    Set& s = sets_[hash & mask_];
    s.way[1] = s.way[0];
    s.way[0] = Entry{
        w.w0, w.w1, valid_until, epoch_, static_cast<int16_t>(cls), static_cast<uint16_t>(tenant)};
  }

 private:
  struct Words {
    uint64_t w0, w1;
  };
  // The key's 16 bytes with the DSCP in the first pad byte (zero in a table key). Put there by
  // arithmetic on the loaded word: a byte stored into a copy and read back as part of a word
  // stalls the load until the store retires (no store forwarding), on every packet.
  static Words words(const Ipv4Key& key, uint8_t dscp) {
    Words w;
    std::memcpy(&w, &key, sizeof(w));
    constexpr unsigned kPadByte = offsetof(Ipv4Key, pad) - 8;
    constexpr unsigned kShift =
        std::endian::native == std::endian::little ? 8 * kPadByte : 8 * (7 - kPadByte);
    w.w1 |= uint64_t{dscp} << kShift;
    return w;
  }
  struct Entry {
    uint64_t w0 = 0, w1 = 0;
    uint64_t valid_until = 0;
    uint32_t epoch = 0;  // epoch_ starts at 1: a zeroed entry matches nothing
    // 16 bits each, so an entry stays 32 bytes and a set one cache line.
    int16_t cls = 0;
    uint16_t tenant = 0;
  };
  static_assert(TenantTable::kMaxTenants <= UINT16_MAX);
  struct alignas(64) Set {
    Entry way[2];
  };
  static_assert(sizeof(Set) == 64);

  uint32_t mask_;
  uint32_t epoch_ = 1;
  uint64_t seen_ = 0;
  std::unique_ptr<Set[]> sets_;
};

}  // namespace dripgate::dataplane
