/* Inter-arrival probe: a tc clsact classifier (ingress or egress) and an XDP program sharing one
 * handler. Counts matching packets, the gap to the previous matching packet (log-linear ns
 * histogram) and packets per burst window. Settings are rodata fixed before load; the maps are
 * read by user space (iat_probe.cc). Built against the uapi headers only, so neither the build
 * host nor the target needs kernel BTF (no CO-RE relocations are used). */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/pkt_cls.h>

/* after linux/bpf.h, which defines the types they use */
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

typedef __u8 uint8_t;
typedef __u16 uint16_t;
typedef __u32 uint32_t;
typedef __u64 uint64_t;
#include "ebpf/iat.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* ---- settings (rodata, set by the loader between open and load) ---- */
/* Which packets count (iat_filter in iat.h); unset criteria match everything. */
const volatile struct iat_filter cfg_filter = {};
/* Burst window widths in ns; 0 disables a window. */
const volatile __u64 cfg_window_ns[IAT_WINDOWS] = {100000, 1000000, 0};
/* tc only: take the arrival time from skb->tstamp when it is nonzero. Off by default: on live
 * traffic skb->tstamp is either 0, a CLOCK_REALTIME rx stamp (only while some socket asked for
 * timestamps) or an EDT departure time on egress, so mixing it with bpf_ktime_get_ns() would
 * corrupt the gaps. BPF_PROG_TEST_RUN passes __sk_buff.tstamp through, which gives the fixtures
 * exact, injected arrival times. */
const volatile __u8 cfg_use_skb_tstamp = 0;

/* ---- state (maps: .bss is one array map, mmap'ed by user space, plus iat_cpu) ---- */
/* totals: the one global last-arrival timestamp is totals.last_ns: an atomic exchange (BPF_XCHG) hands
 * every packet the previous arrival whichever CPU saw it, so there are no per-CPU gaps. Only
 * first_ns and last_ns of this struct are kept here; packets, bytes and filtered_out are summed
 * from iat_cpu by user space. */
struct iat_totals totals = {};
/* count_hist[w]: closed windows of width cfg_window_ns[w] by their packet count
 * (iat_count_bucket); shared by all CPUs, updated with atomic adds when a window closes. */
__u64 count_hist[IAT_WINDOWS][IAT_COUNT_BUCKETS] = {};

/* iat_cpu: counters and the gap histogram per CPU: the gap is computed from the global timestamp above,
 * only its bucket's counter is per CPU, which saves a locked instruction per field per packet. */
struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, 1);
  __type(key, __u32);
  __type(value, struct iat_cpu_counters);
} iat_cpu SEC(".maps");

static __always_inline struct iat_cpu_counters* cpu_counters(void) {
  __u32 key = 0;
  return bpf_map_lookup_elem(&iat_cpu, &key);
}

/* win[w]: the burst windows, lock-free. A bpf_spin_lock around the window fields would be exact
 * too, but its lock/unlock helpers (irq save/restore) cost ~45 ns per packet, half the budget.
 * Packing the open window's index and count into one word keeps every update exact: a
 * packet either increments the count of its window or, when it is the first of a later window,
 * swaps in (index, 1) and closes the previous one — one compare-and-swap either way, retried a few
 * times when another CPU got in between (a packet that loses every retry is counted in `lost`). */
struct iat_window_state win[IAT_WINDOWS] = {};

struct vlan_hdr {
  __be16 tci;
  __be16 proto;
};

#define IPPROTO_SCTP_ 132

/* Longest header chain the parser reads: Ethernet, two VLAN tags, IPv4 with options, L4 ports. */
#define IAT_HDR_MAX (14 + 2 * 4 + 60 + 4)

static __always_inline int prefix_match(const volatile __u32* want, const volatile __u32* mask,
                                        const __u32* have, int words) {
  __u32 diff = 0;
#pragma unroll
  for (int i = 0; i < 4; i++)
    if (i < words) diff |= (have[i] & mask[i]) ^ want[i];
  return diff == 0;
}

/* Returns 1 when the frame in [data, data_end) passes the filter. */
static __always_inline int iat_match(void* data, void* data_end) {
  struct ethhdr* eth = data;
  if ((void*)(eth + 1) > data_end) return 0;
  __be16 proto = eth->h_proto;
  void* l3 = eth + 1;
#pragma unroll
  for (int i = 0; i < 2; i++) {
    if (proto == bpf_htons(ETH_P_8021Q) || proto == bpf_htons(ETH_P_8021AD)) {
      struct vlan_hdr* vh = l3;
      if ((void*)(vh + 1) > data_end) return 0;
      proto = vh->proto;
      l3 = vh + 1;
    }
  }

  const __u32 flags = cfg_filter.flags;
  __u8 l4proto;
  void* l4;
  int has_ports = 1;
  if (proto == bpf_htons(ETH_P_IP)) {
    struct iphdr* ip = l3;
    if ((void*)(ip + 1) > data_end) return 0;
    if (flags & (IAT_F_SRC6 | IAT_F_DST6)) return 0;
    if ((flags & IAT_F_SRC4) && (ip->saddr & cfg_filter.src_mask[0]) != cfg_filter.src_addr[0])
      return 0;
    if ((flags & IAT_F_DST4) && (ip->daddr & cfg_filter.dst_mask[0]) != cfg_filter.dst_addr[0])
      return 0;
    l4proto = ip->protocol;
    __u32 ihl = ip->ihl * 4;
    if (ihl < sizeof(*ip)) return 0;
    if (ip->frag_off & bpf_htons(0x1fff)) has_ports = 0; /* not the first fragment */
    l4 = l3 + ihl;
  } else if (proto == bpf_htons(ETH_P_IPV6)) {
    struct ipv6hdr* ip6 = l3;
    if ((void*)(ip6 + 1) > data_end) return 0;
    if (flags & (IAT_F_SRC4 | IAT_F_DST4)) return 0;
    if ((flags & IAT_F_SRC6) &&
        !prefix_match(cfg_filter.src_addr, cfg_filter.src_mask, ip6->saddr.in6_u.u6_addr32, 4))
      return 0;
    if ((flags & IAT_F_DST6) &&
        !prefix_match(cfg_filter.dst_addr, cfg_filter.dst_mask, ip6->daddr.in6_u.u6_addr32, 4))
      return 0;
    /* Extension headers are not walked: the next header is taken as the protocol. */
    l4proto = ip6->nexthdr;
    l4 = ip6 + 1;
  } else {
    return 0;
  }

  if ((flags & IAT_F_PROTO) && l4proto != cfg_filter.protocol) return 0;
  if (flags & (IAT_F_SPORT | IAT_F_DPORT)) {
    if (l4proto != IPPROTO_TCP && l4proto != IPPROTO_UDP && l4proto != IPPROTO_SCTP_) return 0;
    __be16* ports = l4;
    if (!has_ports || (void*)(ports + 2) > data_end) return 0;
    __u16 sport = bpf_ntohs(ports[0]);
    __u16 dport = bpf_ntohs(ports[1]);
    if ((flags & IAT_F_SPORT) && (sport < cfg_filter.sport_lo || sport > cfg_filter.sport_hi))
      return 0;
    if ((flags & IAT_F_DPORT) && (dport < cfg_filter.dport_lo || dport > cfg_filter.dport_hi))
      return 0;
  }
  return 1;
}

#define IAT_CAS_TRIES 4

static __always_inline void iat_filtered_out(void) {
  struct iat_cpu_counters* c = cpu_counters();
  if (c) c->filtered_out++;
}

static __always_inline void iat_window_update(int i, __u64 now) {
  const __u64 width = cfg_window_ns[i];
  if (!width) return;
  struct iat_window_state* w = &win[i];
  const __u64 idx = (now / width) & IAT_WIN_INDEX_MASK;
  __u64 old = w->state;
  __u64 count = 0;
  __u64 closed = 0;
  int done = 0;
  for (int t = 0; t < IAT_CAS_TRIES; t++) {
    __u64 cur_idx = old >> IAT_WIN_COUNT_BITS;
    __u64 cur_count = old & IAT_WIN_COUNT_MASK;
    /* Modular distance, so the 40-bit index may wrap (after 2^40 windows of uptime). */
    __u64 ahead = (idx - cur_idx) & IAT_WIN_INDEX_MASK;
    __u64 next;
    if (old == 0 || (ahead != 0 && ahead < (IAT_WIN_INDEX_MASK >> 1))) {
      next = (idx << IAT_WIN_COUNT_BITS) | 1;
      count = 1;
      closed = cur_count;
    } else {
      /* Same window, or a packet stamped just before another CPU opened the next one: counted in
       * the open window (off by the cross-CPU reordering, nanoseconds). Saturates. */
      count = cur_count + (cur_count < IAT_WIN_COUNT_MASK);
      next = (old & ~IAT_WIN_COUNT_MASK) | count;
      closed = 0;
    }
    __u64 seen = __sync_val_compare_and_swap(&w->state, old, next);
    if (seen == old) {
      done = 1;
      break;
    }
    old = seen;
  }
  if (!done) {
    __sync_fetch_and_add(&w->lost, 1);
    return;
  }
  if (closed) {
    __sync_fetch_and_add(&w->windows, 1);
    unsigned b = iat_count_bucket(closed);
    if (b < IAT_COUNT_BUCKETS) __sync_fetch_and_add(&count_hist[i][b], 1);
  }
  __u64 max = w->max_count;
  for (int t = 0; t < IAT_CAS_TRIES && count > max; t++) {
    __u64 seen = __sync_val_compare_and_swap(&w->max_count, max, count);
    if (seen == max) break;
    max = seen;
  }
}

static __always_inline void iat_record(__u64 now, __u64 len) {
  struct iat_cpu_counters* c = cpu_counters();
  if (!c) return;
  c->packets++;
  c->bytes += len;
  __u64 prev = __sync_lock_test_and_set(&totals.last_ns, now);
  if (prev == 0) {
    __sync_val_compare_and_swap(&totals.first_ns, 0, now);
  } else {
    /* Two CPUs may exchange in the opposite order of their timestamps; that gap is negative by
     * nanoseconds and is counted as 0. */
    __u64 gap = now > prev ? now - prev : 0;
    unsigned b = iat_bucket(gap);
    if (b < IAT_BUCKETS) c->hist[b]++;
  }
#pragma unroll
  for (int i = 0; i < IAT_WINDOWS; i++) iat_window_update(i, now);
}

SEC("tc")
int iat_tc(struct __sk_buff* skb) {
  void* data = (void*)(long)skb->data;
  void* data_end = (void*)(long)skb->data_end;
  /* Headers of a non-linear skb may sit outside the direct-access area; pull only then. */
  __u32 want = skb->len < IAT_HDR_MAX ? skb->len : IAT_HDR_MAX;
  if (data + want > data_end) {
    bpf_skb_pull_data(skb, want);
    data = (void*)(long)skb->data;
    data_end = (void*)(long)skb->data_end;
  }
  if (!iat_match(data, data_end)) {
    iat_filtered_out();
    return TC_ACT_UNSPEC;
  }
  __u64 now = cfg_use_skb_tstamp ? skb->tstamp : 0;
  if (!now) now = bpf_ktime_get_ns();
  iat_record(now, skb->len);
  return TC_ACT_UNSPEC; /* passive: the next filter or the qdisc's default decides */
}

SEC("xdp")
int iat_xdp(struct xdp_md* ctx) {
  void* data = (void*)(long)ctx->data;
  void* data_end = (void*)(long)ctx->data_end;
  if (!iat_match(data, data_end)) {
    iat_filtered_out();
    return XDP_PASS;
  }
  iat_record(bpf_ktime_get_ns(), data_end - data);
  return XDP_PASS;
}
