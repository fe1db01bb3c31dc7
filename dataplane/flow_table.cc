#include "dataplane/flow_table.h"

#include <rte_errno.h>
#include <rte_hash.h>
#include <rte_hash_crc.h>
#include <rte_malloc.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <new>

namespace dripgate::dataplane {

namespace {

// DPDK object names are short (RTE_HASH_NAMESIZE, ring names with prefixes): keep ours so.
constexpr size_t kMaxNameLen = 12;

// The filter's size: 8 bits per entry (a full table leaves about 1 in 8 bits set), within
// 2^12..2^24 bits (2 MiB of bitmap and 16 MiB of counts at most).
uint32_t filter_bits(uint32_t entries) {
  uint64_t bits = 1u << 12;
  while (bits < 8ull * entries && bits < (1u << 24)) bits <<= 1;
  return static_cast<uint32_t>(bits);
}

FiveTuple to_five_tuple(const Ipv4Key& k) {
  FiveTuple t;
  std::memset(&t, 0, sizeof(t));
  std::memcpy(t.src, &k.src, 4);
  std::memcpy(t.dst, &k.dst, 4);
  t.sport = k.sport;
  t.dport = k.dport;
  t.proto = k.proto;
  t.l3 = L3::kIpv4;
  return t;
}

}  // namespace

std::unique_ptr<FlowTable> FlowTable::create(const FlowTableParams& params, std::string* error) {
  if (params.name.empty() || params.name.size() > kMaxNameLen) {
    *error = "flow table name must be 1.." + std::to_string(kMaxNameLen) + " characters";
    return nullptr;
  }
  if (params.entries < 8 || params.entries > (1u << 28)) {
    *error = "flow table entries must be in 8..2^28, got " + std::to_string(params.entries);
    return nullptr;
  }
  if (params.tsc_hz == 0) {
    *error = "flow table tsc_hz must be > 0";
    return nullptr;
  }
  if (params.max_readers == 0) {
    *error = "flow table max_readers must be > 0";
    return nullptr;
  }

  std::unique_ptr<FlowTable> t(new FlowTable());
  t->entries_ = params.entries;
  t->tsc_hz_ = params.tsc_hz;
  t->idle_ticks_ = static_cast<uint64_t>(params.idle_timeout_s) * params.tsc_hz;
  // Refreshing last-seen at most ~1000 times a second per flow keeps the reader from dirtying
  // the entry's cache line on every packet; idle timeouts are seconds.
  t->refresh_ticks_ = params.tsc_hz / 1024;

  const size_t rcu_size = rte_rcu_qsbr_get_memsize(params.max_readers);
  t->rcu_ = static_cast<rte_rcu_qsbr*>(
      rte_zmalloc_socket("dg_flow_rcu", rcu_size, RTE_CACHE_LINE_SIZE, params.socket_id));
  if (t->rcu_ == nullptr || rte_rcu_qsbr_init(t->rcu_, params.max_readers) != 0) {
    *error = std::string("flow table RCU init failed: ") + rte_strerror(rte_errno);
    return nullptr;
  }

  // Every value slot is held by a live key, a deleted key awaiting its grace period (both
  // bounded by each table's entries + 1 key slots) or a replaced value awaiting its grace
  // period (bounded by the retire ring), so this many slots never run out.
  const size_t retire_cap = params.entries + 8;
  t->slots_ = static_cast<uint32_t>(2 * (params.entries + 1) + retire_cap + 8);
  t->values_ = static_cast<Value*>(rte_zmalloc_socket("dg_flow_values", sizeof(Value) * t->slots_,
                                                      RTE_CACHE_LINE_SIZE, params.socket_id));
  if (t->values_ == nullptr) {
    *error = "flow table: cannot allocate " + std::to_string(t->slots_) + " values";
    return nullptr;
  }
  for (uint32_t i = 0; i < t->slots_; ++i) new (&t->values_[i]) Value{0, 0, 0, {0}};
  t->free_slots_.reserve(t->slots_);
  for (uint32_t i = t->slots_; i > 0; --i) t->free_slots_.push_back(i - 1);
  t->retired_.resize(retire_cap);
  t->sweep_keys_.reserve(2 * (params.entries + 1));
  const uint32_t bits = filter_bits(params.entries);
  t->filter_mask_ = bits - 1;
  t->filter_.reset(new std::atomic<uint64_t>[bits / 64]());
  t->filter_counts_.assign(bits, 0);
  if (!t->create_hash(params, "4", sizeof(Ipv4Key), &t->hash4_, error) ||
      !t->create_hash(params, "6", sizeof(FiveTuple), &t->hash6_, error))
    return nullptr;
  return t;
}

// One family's table: lock-free readers, deleted keys' values returned to free_slots_ through
// the shared RCU state once no reader can hold them.
bool FlowTable::create_hash(const FlowTableParams& params, const char* family, uint32_t key_len,
                            rte_hash** out, std::string* error) {
  static std::atomic<unsigned> instance{0};
  const std::string hash_name = params.name + family + "_" + std::to_string(instance.fetch_add(1));
  rte_hash_parameters hp{};
  hp.name = hash_name.c_str();
  hp.entries = params.entries;
  hp.key_len = key_len;
  hp.hash_func = rte_hash_crc;  // FlowTable::hash_ipv4 computes the same inline
  hp.hash_func_init_val = 0;
  hp.socket_id = params.socket_id;
  hp.extra_flag = RTE_HASH_EXTRA_FLAGS_RW_CONCURRENCY_LF;
  *out = rte_hash_create(&hp);
  if (*out == nullptr) {
    *error = "rte_hash_create(" + hash_name + ") failed: " + rte_strerror(rte_errno);
    return false;
  }
  rte_hash_rcu_config rc{};
  rc.v = rcu_;
  rc.mode = RTE_HASH_QSBR_MODE_DQ;  // deletes never wait for readers
  // Room for every key slot (entries + 1) to sit deleted in the queue: a full queue would leak
  // the slot of the delete that found it full.
  rc.dq_size = params.entries + 64;
  rc.trigger_reclaim_limit = 0;  // try to reclaim on every delete (non-blocking)
  rc.max_reclaim_size = 0;       // default batch
  rc.key_data_ptr = this;
  rc.free_key_data_func = &FlowTable::free_value;
  if (rte_hash_rcu_qsbr_add(*out, &rc) != 0) {
    *error = std::string("rte_hash_rcu_qsbr_add failed: ") + rte_strerror(rte_errno);
    return false;
  }
  return true;
}

FlowTable::~FlowTable() {
  // rte_hash_free drains the hash's defer queue, which calls free_value (and waits for any
  // registered reader to report quiescent): readers must have unregistered by now.
  if (hash4_ != nullptr) rte_hash_free(hash4_);
  if (hash6_ != nullptr) rte_hash_free(hash6_);
  if (values_ != nullptr) {
    for (uint32_t i = 0; i < slots_; ++i) values_[i].~Value();
    rte_free(values_);
  }
  rte_free(rcu_);
}

void FlowTable::free_value(void* self, void* value) {
  // Runs in writer context (inside rte_hash_add/del/free), with writer_mu_ already held.
  auto* t = static_cast<FlowTable*>(self);
  t->free_slots_.push_back(static_cast<uint32_t>(static_cast<Value*>(value) - t->values_));
}

inline int FlowTable::hit(void* data, uint64_t now, uint32_t* tenant, uint64_t* expires) noexcept {
  Value* v = static_cast<Value*>(data);
  if (expires != nullptr) *expires = v->expires;
  if (v->expires != 0 && now >= v->expires) return kNoMatch;
  const uint64_t last = v->last_seen.load(std::memory_order_relaxed);
  if (now > last + refresh_ticks_) v->last_seen.store(now, std::memory_order_relaxed);
  if (tenant != nullptr) *tenant = v->tenant;
  return static_cast<int>(v->cls);
}

FlowTable::Probe FlowTable::probe_of(const FiveTuple& key, Ipv4Key* k4) const noexcept {
  if (key.l3 != L3::kIpv4) return Probe{hash6_, &key};
  *k4 = to_ipv4_key(key);
  return Probe{hash4_, k4};
}

int FlowTable::lookup(const FiveTuple& key, uint64_t now, uint32_t* tenant) noexcept {
  Ipv4Key k4;
  const Probe p = probe_of(key, &k4);
  void* data = nullptr;
  if (tenant != nullptr) *tenant = 0;
  if (rte_hash_lookup_data(p.h, p.key, &data) < 0) return kNoMatch;
  return hit(data, now, tenant);
}

// n <= kMaxBulk keys of h's form; tenants may be null.
void FlowTable::lookup_bulk_in(rte_hash* h, const void** keys, uint32_t n, uint64_t now,
                               int* classes, uint32_t* tenants) noexcept {
  if (n == 0) return;
  uint64_t hits = 0;
  void* data[kMaxBulk];
  if (rte_hash_lookup_bulk_data(h, keys, n, &hits, data) < 0) hits = 0;
  for (uint32_t i = 0; i < n; ++i) {
    uint32_t* tenant = tenants != nullptr ? &tenants[i] : nullptr;
    if (tenant != nullptr) *tenant = 0;
    classes[i] = (hits >> i) & 1 ? hit(data[i], now, tenant) : kNoMatch;
  }
}

void FlowTable::lookup_bulk(const FiveTuple* const* keys, uint32_t n, uint64_t now, int* classes,
                            uint32_t* tenants) noexcept {
  static_assert(kMaxBulk == RTE_HASH_LOOKUP_BULK_MAX);
  while (n > 0) {
    const uint32_t m = n < kMaxBulk ? n : kMaxBulk;
    // Each family's keys in one probe of its table; at[i] is keys[i]'s place in its batch.
    Ipv4Key k4[kMaxBulk];
    const void* p4[kMaxBulk];
    const void* p6[kMaxBulk];
    uint8_t at[kMaxBulk];
    uint32_t n4 = 0, n6 = 0;
    for (uint32_t i = 0; i < m; ++i) {
      if (keys[i]->l3 == L3::kIpv4) {
        k4[n4] = to_ipv4_key(*keys[i]);
        p4[n4] = &k4[n4];
        at[i] = static_cast<uint8_t>(n4++);
      } else {
        p6[n6] = keys[i];
        at[i] = static_cast<uint8_t>(n6++);
      }
    }
    int c4[kMaxBulk], c6[kMaxBulk];
    uint32_t t4[kMaxBulk], t6[kMaxBulk];
    lookup_bulk_in(hash4_, p4, n4, now, c4, tenants != nullptr ? t4 : nullptr);
    lookup_bulk_in(hash6_, p6, n6, now, c6, tenants != nullptr ? t6 : nullptr);
    for (uint32_t i = 0; i < m; ++i) {
      const bool v4 = keys[i]->l3 == L3::kIpv4;
      classes[i] = v4 ? c4[at[i]] : c6[at[i]];
      if (tenants != nullptr) tenants[i] = v4 ? t4[at[i]] : t6[at[i]];
    }
    keys += m;
    classes += m;
    if (tenants != nullptr) tenants += m;
    n -= m;
  }
}

void FlowTable::lookup_bulk_ipv4(const Ipv4Key* keys, const uint32_t* hashes, uint32_t n,
                                 uint64_t now, int* classes, uint32_t* tenants,
                                 uint64_t* expires) noexcept {
  const void* ptrs[kMaxBulk];
  hash_sig_t sigs[kMaxBulk];
  uint8_t at[kMaxBulk];  // the probed keys' places in keys[]
  uint32_t m = 0;
  if (tenants != nullptr) std::memset(tenants, 0, n * sizeof(*tenants));
  for (uint32_t i = 0; i < n; ++i) {
    classes[i] = kNoMatch;
    if (!may_be_tagged(hashes[i])) continue;
    ptrs[m] = &keys[i];
    sigs[m] = hashes[i];
    at[m++] = static_cast<uint8_t>(i);
  }
  if (m == 0) return;
  uint64_t hits = 0;
  void* data[kMaxBulk];
  if (rte_hash_lookup_with_hash_bulk_data(hash4_, ptrs, sigs, m, &hits, data) < 0) hits = 0;
  for (; hits != 0; hits &= hits - 1) {
    const unsigned j = static_cast<unsigned>(__builtin_ctzll(hits));
    classes[at[j]] = hit(data[j], now, tenants != nullptr ? &tenants[at[j]] : nullptr,
                         expires != nullptr ? &expires[at[j]] : nullptr);
  }
}

// Writer-side, under writer_mu_; hash is an IPv4 key's hash_ipv4().
void FlowTable::filter_add(uint32_t hash) {
  const uint32_t bit = hash & filter_mask_;
  uint8_t& c = filter_counts_[bit];
  if (c == UINT8_MAX) return;
  if (c++ == 0) filter_[bit >> 6].fetch_or(uint64_t{1} << (bit & 63), std::memory_order_release);
}

void FlowTable::filter_remove(uint32_t hash) {
  const uint32_t bit = hash & filter_mask_;
  uint8_t& c = filter_counts_[bit];
  if (c == UINT8_MAX) return;  // saturated: its true count is unknown, the bit stays set
  if (--c == 0)
    filter_[bit >> 6].fetch_and(~(uint64_t{1} << (bit & 63)), std::memory_order_release);
}

int FlowTable::register_reader(unsigned thread_id) {
  const int rc = rte_rcu_qsbr_thread_register(rcu_, thread_id);
  if (rc != 0) return -rte_errno;
  rte_rcu_qsbr_thread_online(rcu_, thread_id);
  return 0;
}

void FlowTable::unregister_reader(unsigned thread_id) {
  rte_rcu_qsbr_thread_offline(rcu_, thread_id);
  rte_rcu_qsbr_thread_unregister(rcu_, thread_id);
}

bool FlowTable::alloc_slot(uint32_t* slot) {
  if (free_slots_.empty()) reclaim_retired();
  if (free_slots_.empty()) return false;
  *slot = free_slots_.back();
  free_slots_.pop_back();
  return true;
}

void FlowTable::reclaim_retired() {
  while (retired_count_ > 0) {
    const Retired& r = retired_[retired_head_];
    if (rte_rcu_qsbr_check(rcu_, r.token, false) != 1) break;  // tokens are in order
    free_slots_.push_back(r.slot);
    retired_head_ = (retired_head_ + 1) % retired_.size();
    --retired_count_;
  }
}

// Cuckoo hashing may refuse a key before every entry is used, so the count in use is given
// beside the configured size.
std::string FlowTable::add_error(int rc) const {
  if (rc == -ENOSPC) {
    return "flow table full: " + std::to_string(size()) +
           " flows tagged, dataplane.flow_table_size = " + std::to_string(entries_) +
           " (raising it needs a restart)";
  }
  return std::string("cannot tag the flow: ") + std::strerror(-rc);
}

int FlowTable::add(const FiveTuple& key, uint16_t cls, uint32_t ttl_s, uint64_t now,
                   uint32_t tenant) {
  int rc = 0;
  add_many(&key, 1, cls, ttl_s, now, &rc, tenant);
  return rc;
}

size_t FlowTable::add_many(const FiveTuple* keys, size_t n, uint16_t cls, uint32_t ttl_s,
                           uint64_t now, int* rc, uint32_t tenant) {
  *rc = 0;
  std::lock_guard lock(writer_mu_);
  if (n > 1) warm(keys, n);
  for (size_t i = 0; i < n; ++i) {
    *rc = add_with_room_locked(keys[i], cls, ttl_s, now, tenant);
    if (*rc != 0) return i;
  }
  return n;
}

// rte_hash has no prefetch call, but its bulk lookup prefetches every key's two buckets before
// it reads any: one probe of a tag line's keys takes their cache misses together, where add()
// key by key would wait on each in turn (in a 2^20 table the buckets are far larger than the
// caches). now = 0 makes the probe read-only: hit() refreshes nothing and expires nothing.
void FlowTable::warm(const FiveTuple* keys, size_t n) {
  const FiveTuple* ptrs[kMaxBulk];
  int classes[kMaxBulk];
  for (size_t i = 0; i < n; i += kMaxBulk) {
    const uint32_t m = static_cast<uint32_t>(std::min<size_t>(kMaxBulk, n - i));
    for (uint32_t k = 0; k < m; ++k) ptrs[k] = &keys[i + k];
    lookup_bulk(ptrs, m, 0, classes);
  }
}

int FlowTable::add_with_room_locked(const FiveTuple& key, uint16_t cls, uint32_t ttl_s,
                                    uint64_t now, uint32_t tenant) {
  if (key.l3 != L3::kIpv4 && key.l3 != L3::kIpv6) return -EINVAL;
  const int rc = add_locked(key, cls, ttl_s, now, tenant);
  // Full: slots held by flows that sweep_step() has not reached yet are taken back first, at
  // most ten times a second (a whole walk per refused tag would stall the control socket).
  if (rc != -ENOSPC || (swept_for_room_ && now - last_full_sweep_ < tsc_hz_ / 10)) return rc;
  swept_for_room_ = true;
  last_full_sweep_ = now;
  if (sweep_locked(now) == 0) return rc;
  return add_locked(key, cls, ttl_s, now, tenant);
}

int FlowTable::add_locked(const FiveTuple& key, uint16_t cls, uint32_t ttl_s, uint64_t now,
                          uint32_t tenant) {
  reclaim_retired();
  uint32_t slot = 0;
  if (!alloc_slot(&slot)) return -ENOSPC;
  Value& v = values_[slot];
  v.cls = cls;
  v.tenant = tenant;
  v.expires = ttl_s == 0 ? 0 : now + static_cast<uint64_t>(ttl_s) * tsc_hz_;
  v.last_seen.store(now, std::memory_order_relaxed);

  Ipv4Key k4;
  const Probe p = probe_of(key, &k4);
  const bool ipv4 = p.h == hash4_;
  // Hashed once for the probe, the filter and the add (the IPv4 table's hash is hash_ipv4).
  const hash_sig_t sig = ipv4 ? hash_ipv4(k4) : rte_hash_hash(p.h, p.key);
  void* old = nullptr;
  const bool existed = rte_hash_lookup_with_hash_data(p.h, p.key, sig, &old) >= 0;
  // The two families' tables share the one configured size.
  if (!existed && live_.load(std::memory_order_relaxed) >= entries_) {
    free_slots_.push_back(slot);
    return -ENOSPC;
  }
  if (existed && retired_count_ == retired_.size()) {
    // Every retire slot waits on a reader that has not reported quiescent for a whole table's
    // worth of re-tags: wait for it rather than fail the tag.
    rte_rcu_qsbr_synchronize(rcu_, RTE_QSBR_THRID_INVALID);
    reclaim_retired();
  }
  // Publishes the fully written value (release store inside rte_hash); readers that still hold
  // the old pointer keep reading valid memory until the grace period below has passed.
  if (ipv4 && !existed) filter_add(sig);
  const int rc = rte_hash_add_key_with_hash_data(p.h, p.key, sig, &v);
  if (rc < 0) {
    if (ipv4 && !existed) filter_remove(sig);
    free_slots_.push_back(slot);
    return rc == -ENOSPC ? -ENOSPC : -EINVAL;
  }
  if (existed) {
    const size_t tail = (retired_head_ + retired_count_) % retired_.size();
    retired_[tail] = Retired{static_cast<uint32_t>(static_cast<Value*>(old) - values_),
                             rte_rcu_qsbr_start(rcu_)};
    ++retired_count_;
  } else {
    live_.fetch_add(1, std::memory_order_relaxed);
  }
  bump_generation();
  return 0;
}

bool FlowTable::del(const FiveTuple& key) {
  std::lock_guard lock(writer_mu_);
  Ipv4Key k4;
  const Probe p = probe_of(key, &k4);
  if (rte_hash_del_key(p.h, p.key) < 0) return false;
  if (p.h == hash4_) filter_remove(hash_ipv4(k4));
  live_.fetch_sub(1, std::memory_order_relaxed);
  bump_generation();
  return true;
}

bool FlowTable::collect_stale(rte_hash* h, uint32_t* next, uint64_t visits, uint64_t now) {
  const void* k = nullptr;
  void* d = nullptr;
  for (uint64_t i = 0; i < visits; ++i) {
    if (rte_hash_iterate(h, &k, &d, next) < 0) return false;
    const Value* v = static_cast<const Value*>(d);
    const uint64_t last = v->last_seen.load(std::memory_order_relaxed);
    const bool expired = v->expires != 0 && now >= v->expires;
    const bool idle = idle_ticks_ != 0 && now > last && now - last >= idle_ticks_;
    if (!expired && !idle) continue;
    sweep_keys_.push_back(h == hash4_ ? to_five_tuple(*static_cast<const Ipv4Key*>(k))
                                      : *static_cast<const FiveTuple*>(k));
  }
  return true;
}

// Deleting after the walks keeps rte_hash_iterate's cursor valid.
size_t FlowTable::remove_collected() {
  size_t removed = 0;
  for (const FiveTuple& key : sweep_keys_) {
    Ipv4Key k4;
    const Probe p = probe_of(key, &k4);
    if (rte_hash_del_key(p.h, p.key) < 0) continue;
    if (p.h == hash4_) filter_remove(hash_ipv4(k4));
    ++removed;
  }
  sweep_keys_.clear();
  live_.fetch_sub(static_cast<uint32_t>(removed), std::memory_order_relaxed);
  if (removed != 0) bump_generation();
  return removed;
}

size_t FlowTable::sweep_locked(uint64_t now) {
  reclaim_retired();
  sweep_keys_.clear();
  for (rte_hash* h : {hash4_, hash6_}) {
    uint32_t next = 0;
    collect_stale(h, &next, UINT64_MAX, now);
  }
  return remove_collected();
}

size_t FlowTable::sweep(uint64_t now) {
  std::lock_guard lock(writer_mu_);
  return sweep_locked(now);
}

uint32_t FlowTable::sweep_period_ms() const {
  if (idle_ticks_ == 0 || tsc_hz_ == 0) return 10'000;
  const uint64_t ms = idle_ticks_ / tsc_hz_ * 1000 / 8;
  return static_cast<uint32_t>(std::clamp<uint64_t>(ms, 1000, 10'000));
}

size_t FlowTable::sweep_step(uint64_t now) {
  std::lock_guard lock(writer_mu_);
  reclaim_retired();
  sweep_keys_.clear();
  rte_hash* h = sweep_family_ == 0 ? hash4_ : hash6_;
  if (sweep_next_ == 0) {
    // A table's pass begins: each step walks a share of the flows it holds now (a length in
    // entries: rte_hash_iterate skips empty slots itself). A table that holds nothing is not
    // walked at all.
    const int32_t held = rte_hash_count(h);
    const uint32_t steps = std::max<uint32_t>(1, sweep_period_ms() / kSweepStepMs);
    sweep_share_ = held > 0 ? static_cast<uint32_t>(held) / steps + 1 : 0;
  }
  if (sweep_share_ == 0 || !collect_stale(h, &sweep_next_, sweep_share_, now)) {
    sweep_family_ ^= 1;  // this table's pass is over: the other one's is next
    sweep_next_ = 0;
  }
  return remove_collected();
}
void FlowTable::set_idle_timeout(uint32_t idle_timeout_s) {
  std::lock_guard lock(writer_mu_);
  idle_ticks_ = static_cast<uint64_t>(idle_timeout_s) * tsc_hz_;
}

std::optional<FlowTable::Entry> FlowTable::get(const FiveTuple& key) const {
  std::lock_guard lock(writer_mu_);
  Ipv4Key k4;
  const Probe p = probe_of(key, &k4);
  void* data = nullptr;
  if (rte_hash_lookup_data(p.h, p.key, &data) < 0) return std::nullopt;
  const Value* v = static_cast<const Value*>(data);
  return Entry{static_cast<uint16_t>(v->cls), v->tenant, v->expires,
               v->last_seen.load(std::memory_order_relaxed)};
}

uint32_t FlowTable::size() const {
  return live_.load(std::memory_order_relaxed);
}

}  // namespace dripgate::dataplane
