// The dynamic flow table: flows tagged by the control plane (tag/untag over the control socket)
// map a 5-tuple to a class index and the admitted tenant's id (TenantTable, 0: none), with an
// optional tag expiry and an idle timeout. IPv4 flows
// live in a table of 16-byte keys (Ipv4Key: two CRC words to hash, one vector compare), IPv6
// flows in their own table of 40-byte FiveTuple keys; both share the values and the RCU state,
// and together hold at most `entries` flows.
//
// Concurrency: one or more reader lcores call lookup() lock-free (rte_hash with
// RTE_HASH_EXTRA_FLAGS_RW_CONCURRENCY_LF); writers (add/del/sweep, normally the main lcore) are
// serialized by a mutex among themselves and never block readers. Deleted and replaced entries
// are freed only after every registered reader has passed a quiescent state (rte_rcu_qsbr), so a
// reader never sees freed or reused memory. Readers must register_reader() once and call
// quiescent() regularly (e.g. once per burst) outside any lookup.
#pragma once

#include <rte_hash_crc.h>
#include <rte_rcu_qsbr.h>
#ifdef __SSE4_2__
#include <nmmintrin.h>
#endif

#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "dataplane/parse.h"

struct rte_hash;

namespace dripgate::dataplane {

struct FlowTableParams {
  std::string name = "dg_flows";         // unique per process (DPDK object names)
  uint32_t entries = 65536;              // config::Dataplane::flow_table_size
  uint64_t tsc_hz = 0;                   // ticks per second of the `now` values (rte_get_tsc_hz())
  uint32_t idle_timeout_s = 300;         // 0: entries never idle out
  int socket_id = -1;                    // SOCKET_ID_ANY
  uint32_t max_readers = RTE_MAX_LCORE;  // reader thread ids are 0 .. max_readers-1
};

// One step of rte_hash_crc: the CRC32C of an 8-byte word. Where the build targets SSE4.2 (DPDK's
// x86 baseline does), the instruction itself: rte_hash_crc_8byte tests a global for the CPU's
// support at every step, a load and a branch per packet, and its inline asm is opaque to the
// compiler's scheduling.
inline uint32_t crc32c_u64(uint64_t data, uint32_t init) noexcept {
#ifdef __SSE4_2__
  return static_cast<uint32_t>(_mm_crc32_u64(init, data));
#else
  return rte_hash_crc_8byte(data, init);
#endif
}

class FlowTable {
 public:
  static constexpr int kNoMatch = -1;

  struct Entry {
    uint16_t cls;
    uint32_t tenant;     // TenantTable id; 0: none
    uint64_t expires;    // tsc; 0 = no tag expiry
    uint64_t last_seen;  // tsc of the last lookup hit (or of the add)
  };

  // Needs an initialized EAL. nullptr with *error set on failure.
  static std::unique_ptr<FlowTable> create(const FlowTableParams& params, std::string* error);
  ~FlowTable();
  FlowTable(const FlowTable&) = delete;
  FlowTable& operator=(const FlowTable&) = delete;

  // ---- readers (fast path): no locks, no allocation ----

  // Class index of a live entry, or kNoMatch (absent, or tag expired). A hit records `now` as
  // the entry's last-seen time (relaxed store) so busy flows do not idle out. *tenant (when
  // tenant is not null) is the tag's tenant id, 0 without a live tag. The class and the tenant
  // come from one entry: a re-tag replaces both at once for readers.
  int lookup(const FiveTuple& key, uint64_t now, uint32_t* tenant = nullptr) noexcept;

  // lookup() for up to kMaxBulk keys at once (one rte_hash bulk probe per family, prefetched):
  // classes[i] = class of *keys[i] or kNoMatch, tenants[i] (when tenants is not null) its
  // tenant id or 0.
  static constexpr uint32_t kMaxBulk = 64;  // RTE_HASH_LOOKUP_BULK_MAX
  void lookup_bulk(const FiveTuple* const* keys, uint32_t n, uint64_t now, int* classes,
                   uint32_t* tenants = nullptr) noexcept;
  // The IPv4 table's hash of a key (the table's own hash function, inline): rte_hash_crc's
  // two 8-byte steps for a 16-byte key, without its loop over the length and its tail tests.
  static uint32_t hash_ipv4(const Ipv4Key& key) noexcept {
    static_assert(sizeof(Ipv4Key) == 16);
    uint64_t w[2];
    std::memcpy(w, &key, sizeof(w));
    return crc32c_u64(w[1], crc32c_u64(w[0], 0));
  }
  // lookup_bulk() for IPv4 keys already in their table's form (parse_ipv4_fast's), with their
  // hash_ipv4() computed by the caller; n <= kMaxBulk. Only keys whose hash some tagged key
  // may share are probed (see filter_). tenants[i] as lookup_bulk's; expires[i] (when expires
  // is not null) is the tag's expiry of a hit (0: none), for a caller that remembers the class
  // (ClassCache). Either array may be null.
  void lookup_bulk_ipv4(const Ipv4Key* keys, const uint32_t* hashes, uint32_t n, uint64_t now,
                        int* classes, uint32_t* tenants = nullptr,
                        uint64_t* expires = nullptr) noexcept;

  // Bumped (release) after every change a reader could see in a lookup: a tag, a re-tag, an
  // untag, a sweep that removed entries. A reader that reads it (acquire) before its lookups
  // and finds it unchanged later knows nothing it looked up since has changed.
  uint64_t generation() const noexcept { return generation_.load(std::memory_order_acquire); }
  // How long a hit may go without refreshing the entry's last-seen time (ticks): a caller
  // that remembers a class (ClassCache) keeps it no longer, so busy flows do not idle out.
  uint64_t refresh_ticks() const noexcept { return refresh_ticks_; }

  // RCU reader registration; thread_id < max_readers (the lcore id for DPDK workers).
  int register_reader(unsigned thread_id);
  void unregister_reader(unsigned thread_id);
  // Tells writers this reader holds no reference into the table.
  void quiescent(unsigned thread_id) noexcept { rte_rcu_qsbr_quiescent(rcu_, thread_id); }
  rte_rcu_qsbr* rcu() const noexcept { return rcu_; }

  // ---- writers: serialized internally; never on the fast path ----

  // Tags `key` with class `cls` for tenant id `tenant` (0: none); ttl_s = 0 means no expiry
  // (the idle timeout still applies). Re-tagging an existing key replaces its class, tenant and
  // expiry atomically for readers. Returns 0, or -ENOSPC when the table is full, -EINVAL on
  // bad arguments.
  int add(const FiveTuple& key, uint16_t cls, uint32_t ttl_s, uint64_t now, uint32_t tenant = 0);
  // add() of keys[0, n) in order, under one lock, their buckets fetched together first (a tag
  // line's flows). Returns how many were added: n, or the index of the first one refused, with
  // *rc its code (0 when all were added); the ones before it stay added.
  size_t add_many(const FiveTuple* keys, size_t n, uint16_t cls, uint32_t ttl_s, uint64_t now,
                  int* rc, uint32_t tenant = 0);
  // Why add() returned rc (< 0), for an operator: a full table names the setting to raise.
  std::string add_error(int rc) const;
  // True when the key was present.
  bool del(const FiveTuple& key);
  // Removes entries whose tag expired or that were not seen for idle_timeout_s; returns the
  // count removed. Also frees memory of replaced entries whose grace period has passed.
  size_t sweep(uint64_t now);
  // The same work spread out, as the main lcore does it: called every kSweepStepMs, each call
  // walks the next share of the tables, so that a whole pass takes sweep_period_ms(). A walk
  // costs the same for every slot of flow_table_size, so one pass per second over a table of
  // 2^20 would spend the main lcore's time on slots, not on the tags it serves; lookups never
  // match an expired tag, so a sweep only returns slots, and a tag that finds the table full
  // sweeps it whole first (add()).
  static constexpr uint32_t kSweepStepMs = 100;
  size_t sweep_step(uint64_t now);
  // An eighth of the idle timeout, within 1 s .. 10 s (10 s without an idle timeout): a flow
  // stays at most that much past its idle timeout.
  uint32_t sweep_period_ms() const;
  // A new idle timeout (a reload), used from the next sweep on; 0: entries never idle out.
  void set_idle_timeout(uint32_t idle_timeout_s);
  // Writer-side inspection (stats, tests).
  std::optional<Entry> get(const FiveTuple& key) const;
  // Live entries (deleted ones awaiting their grace period are not counted). Any thread.
  uint32_t size() const;
  uint32_t capacity() const noexcept { return entries_; }

 private:
  struct Value {
    uint64_t expires;
    uint32_t cls;
    uint32_t tenant;
    std::atomic<uint64_t> last_seen;
  };
  struct Retired {
    uint32_t slot;
    uint64_t token;
  };

  FlowTable() = default;
  int hit(void* data, uint64_t now, uint32_t* tenant, uint64_t* expires = nullptr) noexcept;
  void lookup_bulk_in(rte_hash* h, const void** keys, uint32_t n, uint64_t now, int* classes,
                      uint32_t* tenants) noexcept;
  // The table of key's family and key in that table's form (in *k4 for an IPv4 key).
  struct Probe {
    rte_hash* h;
    const void* key;
  };
  Probe probe_of(const FiveTuple& key, Ipv4Key* k4) const noexcept;
  static void free_value(void* self, void* value);
  bool create_hash(const FlowTableParams& params, const char* family, uint32_t key_len,
                   rte_hash** out, std::string* error);
  bool alloc_slot(uint32_t* slot);
  void reclaim_retired();

  rte_hash* hash4_ = nullptr;
  rte_hash* hash6_ = nullptr;
  rte_rcu_qsbr* rcu_ = nullptr;
  Value* values_ = nullptr;
  uint32_t entries_ = 0;
  uint32_t slots_ = 0;
  uint64_t tsc_hz_ = 0;
  uint64_t idle_ticks_ = 0;  // 0: no idle timeout
  uint64_t refresh_ticks_ = 0;

  std::atomic<uint32_t> live_{0};
  std::atomic<uint64_t> generation_{0};
  void bump_generation() { generation_.fetch_add(1, std::memory_order_release); }
  mutable std::mutex writer_mu_;
  std::vector<uint32_t> free_slots_;  // writer-only
  std::vector<Retired> retired_;      // ring, writer-only
  size_t retired_head_ = 0;
  size_t retired_count_ = 0;
  std::vector<FiveTuple> sweep_keys_;  // preallocated scratch for sweep()
  // Where sweep_step() goes on: the table (0: IPv4, 1: IPv6) and rte_hash_iterate's position.
  unsigned sweep_family_ = 0;
  uint32_t sweep_next_ = 0;
  uint32_t sweep_share_ = 0;  // entries a step walks in this table's pass
  bool swept_for_room_ = false;
  uint64_t last_full_sweep_ = 0;  // tsc of the last sweep add() made for room
  // Collects into sweep_keys_ the expired or idle entries of h from *next on, up to `visits`
  // entries; false when the walk reached the table's end.
  bool collect_stale(rte_hash* h, uint32_t* next, uint64_t visits, uint64_t now);
  size_t remove_collected();
  size_t sweep_locked(uint64_t now);
  int add_locked(const FiveTuple& key, uint16_t cls, uint32_t ttl_s, uint64_t now, uint32_t tenant);
  // add_locked(), and when the table is full, a whole sweep for room first (rate limited).
  int add_with_room_locked(const FiveTuple& key, uint16_t cls, uint32_t ttl_s, uint64_t now,
                           uint32_t tenant);
  void warm(const FiveTuple* keys, size_t n);  // see add_many

  // The hashes tagged IPv4 keys may have: bit (hash & filter_mask_) is set while a tagged IPv4
  // key has that bit (filter_counts_ counts them, writer-side; a count that reached its
  // maximum keeps its bit set for good). A clear bit spares the reader the probe: on a box
  // that also classifies by rules most packets belong to untagged flows. A bit is set before
  // its key is added and cleared after its last key is deleted, so no tagged key is missed;
  // a key added during a burst is seen from a later one, as with the probe.
  std::unique_ptr<std::atomic<uint64_t>[]> filter_;
  uint32_t filter_mask_ = 0;
  std::vector<uint8_t> filter_counts_;
  bool may_be_tagged(uint32_t hash) const noexcept {
    const uint32_t bit = hash & filter_mask_;
    return (filter_[bit >> 6].load(std::memory_order_relaxed) >> (bit & 63)) & 1;
  }
  void filter_add(uint32_t hash);
  void filter_remove(uint32_t hash);
};

}  // namespace dripgate::dataplane
