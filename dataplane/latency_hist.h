// Departure-error histogram: actual TX TSC - scheduled TSC, in nanoseconds, signed (a packet can
// leave before its slot when the caller sends a batch). Log-linear buckets: 1 ns wide below
// 1024 ns, so the pacing table (share within +-64/128/256/512 ns) and percentiles below 1 us
// are exact; above, 32 buckets per power of two (at most 3.2% wide).
//
// One writer (the drip lcore records), any number of readers (stats threads) through
// snapshot(). Counters are relaxed atomics written with load+store, not read-modify-write: on
// x86 that is a plain mov, no lock prefix, and readers never see a torn value. A snapshot taken
// while the writer runs can be off by the few samples recorded during the copy.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <vector>

namespace dripgate::dataplane {

class LatencyHist {
 public:
  static constexpr unsigned kLinearBits = 10;  // magnitudes below 1024 ns: one bucket per ns
  static constexpr unsigned kSubBits = 5;      // then 32 buckets per power of two
  static constexpr unsigned kLinear = 1u << kLinearBits;
  static constexpr unsigned kSub = 1u << kSubBits;
  static constexpr unsigned kBuckets = kLinear + (64 - kLinearBits) * kSub;

  // tsc_hz converts ticks to ns in record_ticks().
  explicit LatencyHist(uint64_t tsc_hz = 1'000'000'000) {
    if (tsc_hz == 0) throw std::invalid_argument("tsc_hz must be > 0");
    // ns = ticks * 1e9 / hz, as a Q32 multiplier: exact for tsc_hz = 1e9, within 2^-32
    // relative otherwise.
    ns_per_tick_q32_ =
        static_cast<uint64_t>(std::llround(std::ldexp(1e9 / static_cast<double>(tsc_hz), 32)));
  }

  // Bucket index of a magnitude (|error| in ns).
  static constexpr unsigned bucket_of(uint64_t m) {
    if (m < kLinear) return static_cast<unsigned>(m);
    const unsigned e = 63u - static_cast<unsigned>(std::countl_zero(m));  // >= kLinearBits
    const unsigned sub = static_cast<unsigned>(m >> (e - kSubBits)) - kSub;
    return kLinear + (e - kLinearBits) * kSub + sub;
  }
  // Smallest and largest magnitude that fall in bucket idx (inclusive).
  static constexpr uint64_t bucket_low(unsigned idx) {
    if (idx < kLinear) return idx;
    const unsigned e = kLinearBits + (idx - kLinear) / kSub;
    const uint64_t sub = (idx - kLinear) % kSub;
    return (kSub + sub) << (e - kSubBits);
  }
  static constexpr uint64_t bucket_high(unsigned idx) {
    if (idx < kLinear) return idx;
    const unsigned e = kLinearBits + (idx - kLinear) / kSub;
    return bucket_low(idx) + ((uint64_t{1} << (e - kSubBits)) - 1);
  }

  void record_ns(int64_t ns) { record_ns_n(ns, 1); }

  // n samples with the same error (packets of one TX burst sharing one scheduled time): the
  // histogram, count, sum, min and max end up as after n calls of record_ns(ns), for one
  // update of each counter. n = 0 records nothing.
  void record_ns_n(int64_t ns, uint64_t n) {
    if (n == 0) return;
    const bool neg = ns < 0;
    const uint64_t m = neg ? uint64_t{0} - static_cast<uint64_t>(ns) : static_cast<uint64_t>(ns);
    bump((neg ? neg_ : pos_)[bucket_of(m)], n);
    bump(count_, n);
    // Wrapping (unsigned) arithmetic: a sum of extreme samples must not be undefined behaviour.
    sum_.store(static_cast<int64_t>(static_cast<uint64_t>(sum_.load(std::memory_order_relaxed)) +
                                    static_cast<uint64_t>(ns) * n),
               std::memory_order_relaxed);
    if (ns < min_.load(std::memory_order_relaxed)) min_.store(ns, std::memory_order_relaxed);
    if (ns > max_.load(std::memory_order_relaxed)) max_.store(ns, std::memory_order_relaxed);
  }

  // A TSC difference (actual - scheduled); rounded to the nearest ns.
  void record_ticks(int64_t ticks) { record_ns_n(ticks_to_ns(ticks), 1); }
  // n samples of the same TSC difference (see record_ns_n).
  void record_ticks_n(int64_t ticks, uint64_t n) { record_ns_n(ticks_to_ns(ticks), n); }

  struct Snapshot {
    // Counts per bucket of magnitude; errors of exactly 0 are in pos[0].
    std::vector<uint64_t> pos, neg;
    uint64_t count = 0;
    int64_t sum_ns = 0;
    int64_t min_ns = 0;  // 0 when empty
    int64_t max_ns = 0;

    double mean_ns() const { return count ? static_cast<double>(sum_ns) / count : 0.0; }

    // Samples with |error| <= ns. Exact for ns < 1024; above, a bucket counts only when it lies
    // entirely within the bound (so the share is never overstated).
    uint64_t count_within(uint64_t ns) const {
      uint64_t n = 0;
      for (unsigned i = 0; i < kBuckets && bucket_high(i) <= ns; ++i) n += pos[i] + neg[i];
      return n;
    }
    double share_within(uint64_t ns) const {
      return count ? static_cast<double>(count_within(ns)) / count : 0.0;
    }

    // The p-th percentile (p in [0, 100]) in ns: the smallest recorded value v such that at
    // least p% of the samples are <= v, as the middle of its bucket (exact below 1024 ns).
    // 0 when empty.
    int64_t percentile(double p) const {
      if (count == 0) return 0;
      p = std::clamp(p, 0.0, 100.0);
      uint64_t rank = static_cast<uint64_t>(std::ceil(p / 100.0 * static_cast<double>(count)));
      if (rank == 0) rank = 1;
      uint64_t seen = 0;
      for (unsigned i = kBuckets; i-- > 0;) {  // most negative first
        seen += neg[i];
        if (seen >= rank) return -mid(i);
      }
      for (unsigned i = 0; i < kBuckets; ++i) {
        seen += pos[i];
        if (seen >= rank) return mid(i);
      }
      return max_ns;
    }

   private:
    static int64_t mid(unsigned i) {
      return static_cast<int64_t>(bucket_low(i) + (bucket_high(i) - bucket_low(i)) / 2);
    }
  };

  Snapshot snapshot() const {
    Snapshot s;
    s.pos.resize(kBuckets);
    s.neg.resize(kBuckets);
    for (unsigned i = 0; i < kBuckets; ++i) {
      s.pos[i] = pos_[i].load(std::memory_order_relaxed);
      s.neg[i] = neg_[i].load(std::memory_order_relaxed);
      s.count += s.pos[i] + s.neg[i];
    }
    s.sum_ns = sum_.load(std::memory_order_relaxed);
    if (s.count != 0) {
      s.min_ns = min_.load(std::memory_order_relaxed);
      s.max_ns = max_.load(std::memory_order_relaxed);
    }
    return s;
  }

  uint64_t count() const { return count_.load(std::memory_order_relaxed); }

 private:
  int64_t ticks_to_ns(int64_t ticks) const {
    __extension__ typedef __int128 I128;
    const I128 ns = (static_cast<I128>(ticks) * ns_per_tick_q32_ + (I128{1} << 31)) >> 32;
    return static_cast<int64_t>(ns);
  }
  static void bump(std::atomic<uint64_t>& a, uint64_t d) {
    a.store(a.load(std::memory_order_relaxed) + d, std::memory_order_relaxed);
  }

  uint64_t ns_per_tick_q32_ = 0;
  std::array<std::atomic<uint64_t>, kBuckets> pos_{};
  std::array<std::atomic<uint64_t>, kBuckets> neg_{};
  std::atomic<uint64_t> count_{0};
  std::atomic<int64_t> sum_{0};
  std::atomic<int64_t> min_{std::numeric_limits<int64_t>::max()};
  std::atomic<int64_t> max_{std::numeric_limits<int64_t>::min()};
};

}  // namespace dripgate::dataplane
