/* Shared by the BPF programs (iat.bpf.c) and user space (iat_probe.cc, iat_counters.h, the
 * profiler in tools/iat/): map value layouts and the log-linear histogram bucketing. Plain C, no
 * kernel headers. */
#ifndef DRIPGATE_EBPF_IAT_H
#define DRIPGATE_EBPF_IAT_H

#ifdef __cplusplus
#include <cstdint>
#define IAT_INLINE static inline
#else
#define IAT_INLINE static __always_inline
#endif

/* Log-linear: values 0..7 ns have a bucket each; above, each power of two [2^m, 2^(m+1))
 * is split into IAT_SUB linear sub-buckets. 2^40 ns (~18 min) and above land in the last. */
#define IAT_SUB_BITS 3
#define IAT_SUB (1u << IAT_SUB_BITS)
#define IAT_MAX_MSB 40
#define IAT_BUCKETS ((IAT_MAX_MSB - IAT_SUB_BITS + 1) * IAT_SUB + IAT_SUB) /* 312 */

/* Burst windows (counts of packets per window of W ns); a window of width 0 costs a load and a
 * branch per packet. `serve` runs three (100 us, 1 ms, 10 ms), `live` two by default. */
#define IAT_WINDOWS 3
#define IAT_COUNT_BUCKETS 64 /* histogram of per-window packet counts, log-linear (4 sub) */

IAT_INLINE unsigned iat_msb64(uint64_t v) {
  /* v > 0; plain loop so the BPF verifier sees a bounded program. */
  unsigned m = 0;
  if (v >> 32) {
    m += 32;
    v >>= 32;
  }
  if (v >> 16) {
    m += 16;
    v >>= 16;
  }
  if (v >> 8) {
    m += 8;
    v >>= 8;
  }
  if (v >> 4) {
    m += 4;
    v >>= 4;
  }
  if (v >> 2) {
    m += 2;
    v >>= 2;
  }
  if (v >> 1) {
    m += 1;
  }
  return m;
}

IAT_INLINE unsigned iat_bucket(uint64_t ns) {
  if (ns < IAT_SUB) return (unsigned)ns;
  unsigned m = iat_msb64(ns);
  if (m > IAT_MAX_MSB) return IAT_BUCKETS - 1;
  unsigned sub = (unsigned)((ns >> (m - IAT_SUB_BITS)) & (IAT_SUB - 1));
  return (m - IAT_SUB_BITS + 1) * IAT_SUB + sub;
}

/* Lower bound (inclusive) of bucket b in ns; the upper bound is iat_bucket_low(b + 1). */
IAT_INLINE uint64_t iat_bucket_low(unsigned b) {
  if (b < IAT_SUB) return b;
  unsigned m = b / IAT_SUB + IAT_SUB_BITS - 1;
  unsigned sub = b % IAT_SUB;
  return ((uint64_t)1 << m) + ((uint64_t)sub << (m - IAT_SUB_BITS));
}

/* Packet-count histogram per window: 0..3 exact, then 4 sub-buckets per power of two. */
IAT_INLINE unsigned iat_count_bucket(uint64_t n) {
  if (n < 4) return (unsigned)n;
  unsigned m = iat_msb64(n);
  unsigned b = (m - 1) * 4 + (unsigned)((n >> (m - 2)) & 3);
  return b < IAT_COUNT_BUCKETS ? b : IAT_COUNT_BUCKETS - 1;
}

IAT_INLINE uint64_t iat_count_bucket_low(unsigned b) {
  if (b < 4) return b;
  unsigned m = b / 4 + 1;
  return ((uint64_t)1 << m) + ((uint64_t)(b % 4) << (m - 2));
}

/* Value of the `totals` map (.bss): the BPF side keeps first_ns and last_ns; user space sums
 * packets, bytes and filtered_out from iat_cpu into the same struct. */
struct iat_totals {
  uint64_t packets;
  uint64_t bytes;
  uint64_t first_ns;
  uint64_t last_ns;
  uint64_t filtered_out; /* packets seen but not matching the filter */
};

/* One burst window as user space reports it, decoded from iat_window_state. */
struct iat_window {
  uint64_t width_ns;
  uint64_t cur_start_ns; /* start of the current window */
  uint64_t cur_count;
  uint64_t max_count;
  uint64_t windows; /* closed windows that had at least one packet */
};

/* Per-CPU counters (a BPF_MAP_TYPE_PERCPU_ARRAY of one entry): plain increments, no atomics; user
 * space sums the CPUs. tc and XDP run with bottom halves off, so one CPU never nests two runs. */
struct iat_cpu_counters {
  uint64_t packets;
  uint64_t bytes;
  uint64_t filtered_out;
  uint64_t hist[IAT_BUCKETS];
};

/* Burst-window state as the BPF program keeps it (lock-free): one 64-bit word packs the index of
 * the open window (now / width, low 40 bits) and its packet count (low 24 bits), so opening a new
 * window and counting a packet are one compare-and-swap. User space turns it into iat_window. */
#define IAT_WIN_COUNT_BITS 24
#define IAT_WIN_COUNT_MASK ((1ull << IAT_WIN_COUNT_BITS) - 1)
#define IAT_WIN_INDEX_MASK ((1ull << (64 - IAT_WIN_COUNT_BITS)) - 1)

struct iat_window_state {
  uint64_t state; /* (window index << IAT_WIN_COUNT_BITS) | count */
  uint64_t max_count;
  uint64_t windows; /* closed windows that had at least one packet */
  uint64_t lost;    /* packets not counted in a window: compare-and-swap kept failing */
};

/* Filter settings, fixed before load (BPF `const volatile` rodata). Addresses and masks are in
 * network byte order; IPv4 uses word [0] only. A packet is counted when every enabled criterion
 * matches; non-IP frames never match. Ports apply to TCP, UDP and SCTP first fragments only. */
#define IAT_F_SRC4 0x01u
#define IAT_F_SRC6 0x02u
#define IAT_F_DST4 0x04u
#define IAT_F_DST6 0x08u
#define IAT_F_SPORT 0x10u
#define IAT_F_DPORT 0x20u
#define IAT_F_PROTO 0x40u

struct iat_filter {
  uint32_t src_addr[4];
  uint32_t src_mask[4];
  uint32_t dst_addr[4];
  uint32_t dst_mask[4];
  uint16_t sport_lo, sport_hi; /* inclusive, host byte order */
  uint16_t dport_lo, dport_hi;
  uint8_t protocol; /* IPPROTO_*, with IAT_F_PROTO */
  uint8_t pad[3];
  uint32_t flags; /* IAT_F_* */
};

#endif
